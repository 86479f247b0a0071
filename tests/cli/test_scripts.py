"""The scripts/ tools a reader runs by hand: bench_train.py works in every mode its --help lists (briefly, at
nano size), and every script's --help says its whole first paragraph instead of stopping mid-sentence."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--sizes", "nano", "--steps", "4", "--warmup", "1", "--micro-batch", "1"]


def script(name: str):
    spec = importlib.util.spec_from_file_location(f"script_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bench(monkeypatch, tmp_path):
    """bench_train's main, run in this process (torch is loaded once) from a scratch directory, with torch's
    thread count put back afterwards (--threads sets it process-wide)."""
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    yield script("bench_train").main
    torch.set_num_threads(threads)


def test_default_mode_our_loop_against_a_bare_loop(bench, tmp_path, capsys):
    """The command from the bug report (4 steps, 1 warmup: fewer than one 5-step log interval) ran into a
    missing metrics.jsonl; now every measured step has our loop's rate, and CPU MFU is n/a, not 0%."""
    out = tmp_path / "bench.json"
    assert bench([*FAST, "--pes", "rope", "alibi", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert [(r["size"], r["pe"]) for r in rows] == [("nano", "rope"), ("nano", "alibi")]
    for r in rows:
        assert r["bare_tok_s"] > 0 and r["ours_tok_s"] > 0 and r["params"] == 164_224
        assert r["mfu"] is None and r["peak_mem_gb"] is None and r["log_interval"] == 1
    assert "logging every 1 steps" in printed and "MFU n/a: no known peak" in printed
    table = printed[printed.index("bare tok/s"):]
    assert not re.search(r" 0\.0%", table) and re.search(r"nano +rope +sdpa +164,224 .* n/a +n/a", table)


def test_peer_mode_and_thread_clock(bench, tmp_path, capsys):
    pytest.importorskip("transformers")
    out = tmp_path / "peer.json"
    assert bench(["--peer", *FAST, "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert row["size"] == "nano" and row["loss_diff"] < 1e-4
    assert row["posbench_tok_s"] > 0 and row["peer_tok_s"] > 0 and 0 < row["posbench_mfu"]
    assert bench(["--peer", *FAST, "--threads", "1", "--clock", "thread"]) == 0
    assert "thread clock" in capsys.readouterr().out


@pytest.mark.slow
def test_peer_mode_with_compile(bench, capsys):  # torch.compile on a CPU: ~50 s on 2 cores
    pytest.importorskip("transformers")
    assert bench(["--peer", "--compile", *FAST]) == 0
    assert "compiled tok/s" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_mode(bench, tmp_path):
    out = tmp_path / "cuda.json"
    assert bench(["--device", "cuda", *FAST, "--pes", "rope", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert row["ours_tok_s"] > 0 and row["peak_mem_gb"] > 0


def test_bad_step_counts_are_usage_errors(bench, capsys):
    with pytest.raises(SystemExit) as e:
        bench(["--steps", "3", "--warmup", "3"])
    assert e.value.code == 2 and "--steps (3) must exceed --warmup (3)" in capsys.readouterr().err


ARGPARSE_SCRIPTS = sorted(p.stem for p in (ROOT / "scripts").glob("*.py") if "ArgumentParser(" in p.read_text()
                          or "config_parser(" in p.read_text())


@pytest.mark.parametrize("name", ARGPARSE_SCRIPTS)
def test_help_says_the_whole_first_paragraph(name, capsys, monkeypatch):
    module = script(name)
    first = " ".join(module.__doc__.strip().split("\n\n")[0].split())
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    with pytest.raises(SystemExit) as e:
        module.main(["--help"])
    assert e.value.code == 0
    assert first in " ".join(capsys.readouterr().out.split()), f"{name}.py --help cuts its description short"


@pytest.mark.parametrize("args, message", [
    (["--metric", "bogus"], "argument --metric: invalid choice: 'bogus'"),
    (["--confidence", "1.5"], "--confidence must be in (0, 1) and --n-boot >= 100, got 1.5 and 10000"),
])
def test_compare_studies_bad_arguments_are_usage_errors(tmp_path, capsys, args, message):
    """Exit 2 before any study is read (exit 1 means "the studies differ"; --metric bogus compared nothing, exit 0)."""
    with pytest.raises(SystemExit) as e:
        script("compare_studies").main([str(tmp_path / "a"), str(tmp_path / "b"), *args])
    assert e.value.code == 2 and message in capsys.readouterr().err
