"""gpu_check studies --plan: the planner's arithmetic by hand, the probe's estimate by hand, the asks' parsing, and
the dry run end to end on the CPU (a probe, then the planned study with its seeds batched, packed as it finishes,
the packed folder reported again with --report-only)."""

import argparse
import json
import tarfile

import pytest

from posbench.cli.study import main as study_main
from posbench.gpucheck.study_plan import Ask, cell_seconds, parse_ask, plan
from tests.gpucheck.test_gpu_check import run_isolated
from tests.studies.test_study import mini


def test_the_plan_gives_each_study_in_order_the_seeds_that_fit():
    asks = [Ask("quickstart", 20, 10), Ask("pe_zoo", 10, 10), Ask("long_context", 10, 10), Ask("mqar", 10, 10)]
    rows = {"quickstart": 20, "pe_zoo": 52, "long_context": 11, "mqar": 8}
    cell_s = {"quickstart": 0.05, "pe_zoo": 0.5, "long_context": 3.0, "mqar": 1.0}
    picks = plan(asks, rows, cell_s, budget_s=540, start_s=20)
    # quickstart: 1 s a seed (20 rows x 0.05 s), all 20 fit: 20 + 20 = 40 s, 500 left
    # pe_zoo: 26 s a seed, (500 - 20) / 26 = 18.5 seeds fit, 10 asked: 20 + 260 = 280 s, 220 left
    # long_context: 33 s a seed, (220 - 20) / 33 = 6.06 < 10: skipped (10 seeds need 20 + 330 = 350 s)
    # mqar: 8 s a seed, (220 - 20) / 8 = 25, 10 asked: 20 + 80 = 100 s, 120 left
    assert [(p.ask.study, p.seeds, p.seconds) for p in picks] == [
        ("quickstart", 20, 40.0), ("pe_zoo", 10, 280.0), ("long_context", 0, 0.0), ("mqar", 10, 100.0)]
    assert picks[2].reason == "10 seeds need 350 s, 220 s left"
    # fewer seconds: the quickstart gets the seeds that fit, above its floor; nothing is left for the others
    short = plan(asks[:2], rows, cell_s, budget_s=35, start_s=20)
    assert [(p.seeds, p.seconds) for p in short] == [(15, 35.0), (0, 0.0)]
    assert short[1].reason == "10 seeds need 280 s, 0 s left"


def test_the_probe_scales_only_training_to_the_full_steps():
    # 3 cells in 30 s, training 60% of their CPU time, at a tenth of the steps: 10 s a cell, of which 6 s train
    # (x 10 = 60 s) and 4 s do not: 64 s a cell at the full steps
    assert cell_seconds(30.0, 3, {"startup": 2.0, "rows": 0.0, "train": 6.0, "eval": 2.0}, 10.0) == pytest.approx(64)
    assert cell_seconds(30.0, 3, {}, 10.0) == pytest.approx(100)  # no phases: all of it counted as training


def test_asks_parse_or_say_what_to_give():
    assert parse_ask("quickstart:20:10") == Ask("quickstart", 20, 10)
    assert parse_ask("configs/study/x.yaml:5:5").name == "x"
    for bad in ("quickstart", "quickstart:ten:5", "quickstart:5:6", "quickstart:5:0"):
        with pytest.raises(argparse.ArgumentTypeError, match="quickstart"):
            parse_ask(bad)


def test_plan_dry_run_end_to_end(tmp_path):
    study = mini(tmp_path)
    out = tmp_path / "out"
    done = run_isolated(["studies", "--dry-run", "--plan", "--budget-s", "400", "--plan-studies", f"{study}:2:2",
                         "--plan-workers", "1", "--runs", str(tmp_path / "runs"), "--out", str(out)], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| mini  | ok" in done.stdout
    (row,) = json.loads((out / "studies.json").read_text())["tables"]["plan"]
    assert row["seeds"] == 2 and row["rows"] == 2 and row["cells"] == 4 and row["cell_s"] > 0
    assert row["command"].endswith("--seeds 0 1 --smoke --batch-seeds")
    assert "4 cells (4 run now)" in (out / "mini.log").read_text()
    groups = {p.name: p.read_text() for p in (tmp_path / "runs" / "mini" / "logs").glob("*.log")}
    assert sorted(groups) == ["k_back_learned_s0-1.log", "k_back_rope_s0-1.log"]  # one group per PE
    assert all("as one batched model" in text for text in groups.values())
    with tarfile.open(out / "mini.tar.gz") as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    folder = tmp_path / "unpacked" / "mini"
    assert (folder / "cells" / "k_back_learned_s1.json").is_file()
    before = json.loads((folder / "results.json").read_text())["cells"]
    assert study_main([str(study), "--smoke", "--seeds", "0", "1", "--report-only", "--out", str(folder),
                       "--no-progress"]) == 0
    assert json.loads((folder / "results.json").read_text())["cells"] == before
