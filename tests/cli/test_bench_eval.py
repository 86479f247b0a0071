"""scripts/bench_eval.py at toy settings: every model of every PE runs every cell, the table has RoPE's ratio and
the before/after pair of a bias PE, and the memory pass (a second process) fills the peak column."""

import json
import sys

import pytest
import torch

from tests.cli.test_scripts import script


@pytest.fixture
def bench(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    yield script("bench_eval").main
    torch.set_num_threads(threads)


def test_rows_and_table(bench, tmp_path, capsys):
    out = tmp_path / "rows.json"
    args = ["--pes", "rope", "alibi", "--lengths", "64", "--ppl-tokens", "128", "--algorithmic", "",
            "--passkey-lengths", "--json", str(out)]
    assert bench([*args, "--no-memory"]) == 0
    rows = json.loads(out.read_text())
    assert [(r["pe"], r["kernel"], r["before"]) for r in rows] == [
        ("rope", "sdpa", False), ("alibi", "sdpa_bias", False), ("alibi", "eager", True)]
    assert all(r["cell"] == "ppl 64" and r["seconds"] > 0 and r["peak_mib"] is None for r in rows)
    table = capsys.readouterr().out
    assert "| rope | ppl 64 | - | - | - |" in table and "| alibi | ppl 64 |" in table and "sdpa_bias" in table


@pytest.mark.slow  # a second process imports torch and posbench: ~10 s on a busy machine
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak memory reads /proc")
def test_the_memory_pass_fills_the_peaks(bench, tmp_path):
    out = tmp_path / "rows.json"
    assert bench(["--pes", "alibi", "--lengths", "64", "--ppl-tokens", "64", "--algorithmic", "",
                  "--passkey-lengths", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert len(rows) == 2 and all(r["peak_mib"] is not None and r["peak_mib"] >= 0 for r in rows)


def test_an_unknown_pe_is_a_usage_error_before_any_work(bench, capsys):
    with pytest.raises(SystemExit) as e:
        bench(["--pes", "rope", "kerple"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown PE kerple" in err and "kerple_log" in err and "Traceback" not in err
