"""A sweep prints its wall-time estimate before its first run, from the grid's one estimator (grid/estimate.py, the
study's and the app's): 6 x params x the tokens each unfinished run trains, a branch run only its cooldown."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from posbench.config_loader import load, to_dict
from posbench.evaluation.eval_config import EvalConfig
from posbench.grid.cells import pending
from posbench.grid.estimate import OTHER_CPU_S_PER_CELL, TRAIN_FLOP_PER_CPU_S, estimate, machine_speed
from posbench.sweeps import sweep_runner
from posbench.sweeps.execute import PretrainCell
from posbench.sweeps.sweep_runner import run_sweep
from posbench.sweeps.sweep_spec import load_sweep, plan_runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_sweep import make_data, sweep_yaml  # noqa: E402


def test_the_estimate_counts_each_runs_tokens_and_a_branch_runs_cooldown_by_hand(tmp_path):
    data = make_data(tmp_path)
    run = yaml.safe_load(sweep_yaml(tmp_path, data).read_text())["run"]
    run["train"]["target_budgets"] = [8192, 16384]
    spec = load_sweep(str(sweep_yaml(tmp_path, data, run=run)))
    runs = plan_runs(spec, tmp_path / "out")
    assert [bool(r.parent) for r in runs] == [False, True, False, True]  # each PE's main run and its 8K branch
    from posbench.training.plan import make_plan

    main = make_plan(runs[0].cfg, 1, "cpu")
    n = main.n_params
    (decay,) = [d for d, b in main.branch_points.items() if b == 8192]
    assert 0 < decay < 8192
    est = estimate([PretrainCell(r) for r in runs], workers=1)
    flop = 2 * 6.0 * n * (16384 + 8192 - decay)
    assert (est.cells, est.todo, est.unit) == (4, 4, "runs") and est.train_flop == pytest.approx(flop)
    assert est.minutes == pytest.approx((flop / TRAIN_FLOP_PER_CPU_S + 4 * OTHER_CPU_S_PER_CELL) / machine_speed() / 60)
    assert est.text().startswith("4 runs: ")


def test_the_sweep_prints_the_estimate_before_its_first_run(tmp_path, monkeypatch):
    raw_eval = {"suites": ["ppl"], "lengths": [64], "device": "cpu", "ppl": {"protocols": ["nonoverlap"],
                                                                             "max_tokens": 512}}
    spec = load_sweep(str(sweep_yaml(tmp_path, make_data(tmp_path), eval=raw_eval)))
    out = tmp_path / "out"
    seen, kinds = [], []
    # the sweep takes its runs through the grid's one `pending` (the study does too: test_study_rounds.py)
    monkeypatch.setattr(sweep_runner, "pending", lambda cells, *a: kinds.append(cells[0].kind) or pending(cells, *a))
    run_sweep(spec, out, progress=False, log=lambda line: seen.append((line, (out / "done").exists())))
    assert kinds == ["pretrain"]
    assert seen[0][0].startswith("estimate: 2 runs: ") and seen[0][1] is False
    # each checkpoint was evaluated with what the old late loading built from the raw `eval:` mapping
    old = to_dict(load(EvalConfig, overrides=[{"progress": False}, raw_eval], where="sweep.eval"))
    recorded = [json.loads(p.read_text())["eval_config"] for p in sorted((out / "eval").glob("*/results.json"))]
    assert len(recorded) == 2 and all(r == old for r in recorded)
