"""eval.py's suites on every final checkpoint of a sweep, one output directory per run.

Results go to `<out>/eval/<run>/` (never inside a checkpoint's step directory, which a later save may
replace), and a run whose results.json exists is not evaluated again, so an interrupted sweep resumes here
too. Checkpoints are evaluated one at a time through the evaluation runner's own API.
"""

from __future__ import annotations

import json
from pathlib import Path

from tqdm import tqdm

from posbench.evaluation.config import EvalConfig
from posbench.evaluation.runner import run_eval
from posbench.sweeps.spec import Run


def eval_dir(out_dir: Path, run: Run) -> Path:
    return out_dir / "eval" / run.name


def final_checkpoint(run: Run) -> Path:
    return Path(run.cfg.train.out_dir) / run.name / "latest"


def evaluate_all(runs: list[Run], out_dir: Path, cfg: EvalConfig, progress: bool = True, log=print) -> dict:
    """{run name: results payload} for every run, evaluating the ones without results yet."""
    results = {}
    with tqdm(total=len(runs), desc="sweep eval", unit="ckpt", disable=not progress) as bar:
        for run in runs:
            target = eval_dir(out_dir, run)
            if not (target / "results.json").is_file():
                log(f"sweep: evaluating {run.name}")
                run_eval([str(final_checkpoint(run))], cfg, target, log=lambda *_: None)
            results[run.name] = json.loads((target / "results.json").read_text())
            bar.update()
    return results
