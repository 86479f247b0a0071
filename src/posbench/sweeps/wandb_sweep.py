"""WandB sweeps over train.py: check a sweep file against the typed config, render the command an agent
runs, and launch one trial on every GPU of the machine.

A sweep file (configs/wandb_sweeps/*.yaml) is WandB's own format: `wandb sweep FILE` registers it and
`wandb agent ID` runs trials, each as the file's `command` with `${args_no_hyphens}` expanded to the
trial's dotted overrides (`optim.lr=0.0007`), which train.py parses like any other. The program is
scripts/launch.py, which runs train.py directly on one GPU or CPU and under torchrun on several, and
names the run after the trial so trials never share a run directory.
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

from posbench.errors import ConfigError
from posbench.yaml_io import load_yaml

ROOT = Path(__file__).resolve().parents[3]
METHODS = ("grid", "random", "bayes")
METRIC = "val/loss"  # what the training loop logs at each validation (training/loop.py)


def load_sweep_file(path: str | Path) -> dict:
    """The sweep mapping, after the checks wandb would only make on its server (or never): a known method,
    the metric the loop logs, a command that passes the trial's overrides, parameters that are config keys."""
    sweep = load_yaml(Path(path))
    where = f"sweep file {path}"
    if sweep.get("method") not in METHODS:
        raise ConfigError(f"{where}: method must be one of {list(METHODS)}, got {sweep.get('method')!r}")
    if (sweep.get("metric") or {}).get("name") != METRIC:
        raise ConfigError(f"{where}: metric.name must be `{METRIC}` (the key train.py logs at validation)")
    if "${args_no_hyphens}" not in sweep.get("command", []):
        raise ConfigError(f"{where}: command must contain ${{args_no_hyphens}} (train.py takes dotted key=value)")
    if not sweep.get("parameters"):
        raise ConfigError(f"{where}: no parameters to search")
    return sweep


def sample_values(sweep: dict) -> dict:
    """One value per parameter (first of `values`, `value`, or `min`): enough to check keys and types."""
    out = {}
    for key, spec in sweep["parameters"].items():
        if "values" in spec:
            out[key] = spec["values"][0]
        elif "value" in spec:
            out[key] = spec["value"]
        elif "min" in spec:
            out[key] = spec["min"]
        else:
            raise ConfigError(f"sweep parameter {key}: give values, value or min/max")
    return out


def render_command(sweep: dict, params: dict, interpreter: str = "python") -> list[str]:
    """The argv a `wandb agent` runs for a trial with `params`, using the agent's own helpers
    (wandb/wandb_agent.py, Agent._command_run) so the macros expand exactly as they will."""
    from wandb.sdk.launch.sweeps import utils as sweep_utils

    command = sweep_utils.create_sweep_command(copy.deepcopy(sweep["command"]))
    macros = sweep_utils.create_sweep_command_args({"args": {k: {"value": v} for k, v in params.items()}})
    macros.update(interpreter=[interpreter], program=[sweep["program"]], env=["/usr/bin/env"])
    out: list[str] = []
    for chunk in map(str, command):
        is_macro = chunk.startswith("${") and chunk.endswith("}")
        out += (macros.get(chunk[2:-1]) or []) if is_macro else [chunk]
    return out


def launch_command(args: list[str], n_gpus: int, env: dict) -> list[str]:
    """train.py with `args`: under torchrun with one process per GPU when there are several. Inside a
    sweep trial (WANDB_RUN_ID set by the agent) the run is named after the trial unless args name it."""
    train = str(ROOT / "train.py")
    args = list(args)
    run_id = env.get("WANDB_RUN_ID")
    if run_id and not any(a.startswith("train.run_name=") for a in args):
        args.append(f"train.run_name=sweep-{env.get('WANDB_SWEEP_ID', 'local')}-{run_id}")
    if n_gpus > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n_gpus}",
                train, *args]
    return [sys.executable, train, *args]


def gpu_count(env: dict = os.environ) -> int:
    """POSBENCH_NPROC when set (e.g. to use fewer GPUs), else the CUDA devices torch sees."""
    if env.get("POSBENCH_NPROC"):
        return int(env["POSBENCH_NPROC"])
    import torch

    return torch.cuda.device_count()


def trial_config(sweep: dict, params: dict):
    """The typed RunConfig of one trial, parsed from the rendered command exactly as train.py parses it:
    a parameter that is not a config key, or a value of the wrong type, fails here with the nearest key."""
    from posbench.config import config_from_args, config_parser

    argv = render_command(sweep, params)
    args = argv[argv.index(sweep["program"]) + 1:]
    return config_from_args(config_parser("sweep trial").parse_args(args))
