"""WandB sweep files: parsed, every parameter a typed config key, the agent's command rendered with wandb's own
helpers, and one trial run offline through the launcher."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posbench.errors import ConfigError
from posbench.sweeps.wandb_sweep import (
    launch_command,
    load_sweep_file,
    render_command,
    sample_values,
    trial_config,
)

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "configs" / "wandb_sweeps").glob("*.yaml"))


def test_there_are_sweep_files():
    assert {f.stem for f in FILES} >= {"tiny_lr", "pe_grid", "cpu_smoke"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_sweep_file_parameters_are_config_keys(path):
    sweep = load_sweep_file(path)
    params = sample_values(sweep)
    cfg = trial_config(sweep, params)
    for key, value in params.items():  # each sampled value lands in the typed field it names
        node = cfg
        for part in key.split("."):
            node = getattr(node, part)
        assert node == value, key


def test_tiny_lr_is_bayes_with_hyperband_and_renders_like_the_agent():
    sweep = load_sweep_file(ROOT / "configs/wandb_sweeps/tiny_lr.yaml")
    assert sweep["method"] == "bayes" and sweep["early_terminate"]["type"] == "hyperband"
    cmd = render_command(sweep, {"optim.lr": 0.0007, "optim.weight_decay": 0.05})
    assert cmd == ["/usr/bin/env", "python", "scripts/launch.py", "--model-size", "tiny", "--pe-type", "rope",
                   "train.target_budgets=[20]", "train.eval_interval=250", "optim.lr=0.0007", "optim.weight_decay=0.05"]


def test_bad_sweep_files_are_refused(tmp_path):
    good = (ROOT / "configs/wandb_sweeps/cpu_smoke.yaml").read_text()
    cases = [(good.replace("name: val/loss", "name: val_loss"), "metric.name must be `val/loss`"),
             (good.replace("method: random", "method: bayesian"), "method must be one of"),
             (good.replace("  - ${args_no_hyphens}\n", ""), "args_no_hyphens")]
    for text, message in cases:
        f = tmp_path / "s.yaml"
        f.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_sweep_file(f)
    sweep = load_sweep_file(ROOT / "configs/wandb_sweeps/cpu_smoke.yaml")
    with pytest.raises(ConfigError, match="optim.lr"):
        trial_config(sweep, {"optim.lrr": 1e-3})


def test_launcher_picks_torchrun_for_several_gpus_and_names_the_trial():
    env = {"WANDB_RUN_ID": "abc", "WANDB_SWEEP_ID": "sw1"}
    one = launch_command(["optim.lr=1e-3"], 1, env)
    assert one[1].endswith("train.py") and one[2:] == ["optim.lr=1e-3", "train.run_name=sweep-sw1-abc"]
    many = launch_command(["train.run_name=mine"], 4, env)
    assert many[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]
    assert many[-1] == "train.run_name=mine"
    assert launch_command([], 0, {})[2:] == []


def test_a_trial_runs_offline_through_the_launcher(tmp_path):
    sweep = load_sweep_file(ROOT / "configs/wandb_sweeps/cpu_smoke.yaml")
    cmd = render_command(sweep, {"optim.lr": 0.003, "model.dropout": 0.0}, interpreter=sys.executable)
    cmd += [f"train.out_dir={tmp_path / 'ck'}", "train.max_steps=8"]  # a few steps
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_RUN_ID": "trial1", "WANDB_DIR": str(tmp_path),
           "POSBENCH_NPROC": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    env.pop("WANDB_API_KEY", None)
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    run_dir = tmp_path / "ck" / "sweep-local-trial1"
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    vals = [r["val/loss"] for r in rows if "val/loss" in r]
    assert len(vals) == 1 and vals[0] > 0  # eval_interval=8: one validation in 8 steps
    assert list((run_dir / "wandb").glob("offline-run-*-trial1"))  # the trial's own WandB run, offline
