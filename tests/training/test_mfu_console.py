"""MFU where no peak is known: a CPU run logs no `mfu` and its console says "mfu n/a (no peak for this
device)" once instead of a made-up "mfu 0.0%" on every line; with a known peak the value is the PaLM formula."""

import json
import math
from pathlib import Path

from posbench.training import loop
from posbench.training.batch_sources import RandomTokens
from posbench.training.loggers import ConsoleLogger
from posbench.training.metrics import mfu
from tests.training.helpers import nano_config

ROW = {"step": 1, "tokens": 512, "loss": 2.5, "lr": 1e-3, "grad_norm": 0.5, "tokens_per_s": 1000.0, "eta_s": 60}


def test_mfu_is_the_palm_fraction_or_none_without_a_peak():
    # 6e9 FLOPs/token x 1e4 tokens/s over two H100s at 989 TFLOP/s each
    assert math.isclose(mfu(6e9, 1e4, 989e12, 2), 6e13 / 1.978e15, rel_tol=1e-12)
    assert mfu(6e9, 1e4, 0.0, 1) is None


def test_console_says_na_once_and_omits_the_field(capsys):
    console = ConsoleLogger()
    console.log(ROW)
    console.log({**ROW, "step": 2})
    console.log({"step": 2, "tokens": 1024, "val_loss": 2.4})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "mfu n/a (no peak for this device)"
    assert len(lines) == 4 and sum("mfu" in line for line in lines) == 1
    assert lines[1] == ("step      1 | tokens 5.120e+02 | loss 2.5000 | lr 1.00e-03 | grad 0.500 | 1,000 tok/s | "
                        "eta 0h01m")
    ConsoleLogger().log({**ROW, "mfu": 0.4123})
    assert "| 1,000 tok/s | mfu 41.2% | eta 0h01m" in capsys.readouterr().out


def test_a_cpu_run_logs_no_mfu_and_never_zero_percent(tmp_path, capsys):
    out = loop.train(nano_config(tmp_path, "train.max_steps=3", "train.log_interval=1"), RandomTokens(512, 64))
    rows = [json.loads(x) for x in (Path(out["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3]
    assert not any("mfu" in r for r in rows)
    printed = capsys.readouterr().out
    assert printed.count("mfu n/a (no peak for this device)") == 1 and "mfu 0.0%" not in printed
