"""gpu_check studies --plan: the planner's arithmetic by hand, the probe's estimate by hand, the asks' parsing, and
the dry run end to end on the CPU (a probe, then the planned study with its seeds batched, packed as it finishes,
the packed folder reported again with --report-only)."""

import argparse
import json
import tarfile

import pytest

from posbench.cli.study import main as study_main
from posbench.gpucheck.study_plan import Ask, parse_ask, plan, seed_seconds
from tests.gpucheck.test_gpu_check import run_isolated
from tests.studies.test_study import mini


def test_the_plan_gives_each_study_in_order_the_seeds_that_fit():
    asks = [Ask("quickstart", 20, 10), Ask("pe_zoo", 10, 10), Ask("long_context", 10, 10), Ask("mqar", 10, 10)]
    seed_s = {"quickstart": 1.0, "pe_zoo": 26.0, "long_context": 33.0, "mqar": 8.0}
    picks = plan(asks, seed_s, budget_s=540, start_s=20)
    # quickstart: all 20 seeds fit: 20 + 20 x 1 = 40 s, 500 left
    # pe_zoo: (500 - 20) / 26 = 18.5 seeds fit, 10 asked: 20 + 260 = 280 s, 220 left
    # long_context: (220 - 20) / 33 = 6.06 < 10: skipped (10 seeds need 20 + 330 = 350 s)
    # mqar: (220 - 20) / 8 = 25, 10 asked: 20 + 80 = 100 s, 120 left
    assert [(p.ask.study, p.seeds, p.seconds) for p in picks] == [
        ("quickstart", 20, 40.0), ("pe_zoo", 10, 280.0), ("long_context", 0, 0.0), ("mqar", 10, 100.0)]
    assert picks[2].reason == "10 seeds need 350 s, 220 s left"
    # fewer seconds: the quickstart gets the seeds that fit, above its floor; nothing is left for the others
    short = plan(asks[:2], seed_s, budget_s=35, start_s=20)
    assert [(p.seeds, p.seconds) for p in short] == [(15, 35.0), (0, 0.0)]
    assert short[1].reason == "10 seeds need 280 s, 0 s left"


def test_the_probe_scales_training_and_rows_to_the_full_steps():
    # 3 cells in 30 s (10 s a cell) at a tenth of the steps; of their CPU time training 50%, rows 10%, the rest
    # (start-up, scoring) 40%. A cell at full steps: 10 x (0.5 x 10 + 0.4) = 54 s; a task's table: 10 x 0.1 x 10
    # = 10 s. One seed of 4 rows and 2 tasks: 4 x 54 + 2 x 10 = 236 s
    phases = {"startup": 2.0, "rows": 1.0, "train": 5.0, "eval": 2.0}
    assert seed_seconds(30.0, 3, phases, 10.0, rows=4, tasks=2) == pytest.approx(236)
    assert seed_seconds(30.0, 3, {}, 10.0, rows=4, tasks=2) == pytest.approx(400)  # no phases: all training


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
    assert row["seeds"] == 2 and row["rows"] == 2 and row["cells"] == 4 and row["seed_s"] > 0
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
