"""eval.py's suites on every final checkpoint of a sweep, one output directory per run.

Results go to `<out>/eval/<run>/` (never inside a checkpoint's step directory, which a later save may
replace), and a run whose results.json exists is not evaluated again, so an interrupted sweep resumes here
too. Checkpoints are evaluated through the evaluation runner's own API, one at a time or `workers` at a time.
"""

from __future__ import annotations

import json
from pathlib import Path

from tqdm import tqdm

from posbench.errors import user_paths
from posbench.evaluation.eval_config import EvalConfig
from posbench.evaluation.eval_runner import run_eval
from posbench.fileio import no_link_below
from posbench.procpool import run_jobs
from posbench.sweeps.sweep_spec import Run


def eval_dir(out_dir: Path, run: Run) -> Path:
    return out_dir / "eval" / run.name


def final_checkpoint(run: Run) -> Path:
    return Path(run.cfg.train.out_dir) / run.name / "latest"


def evaluate_one(run: Run, out_dir: Path, cfg: EvalConfig) -> None:
    with user_paths():  # the sweep's eval/<run>/ must not be a link to elsewhere (fileio's module doc)
        no_link_below(out_dir, eval_dir(out_dir, run))
    run_eval([str(final_checkpoint(run))], cfg, eval_dir(out_dir, run), log=lambda *_: None)


def evaluate_all(runs: list[Run], out_dir: Path, cfg: EvalConfig, progress: bool = True, log=print,
                 workers: int = 1) -> dict:
    """{run name: results payload} for every run, evaluating the ones without results yet,
    `workers` checkpoints at a time."""
    todo = [r for r in runs if not (eval_dir(out_dir, r) / "results.json").is_file()]
    with tqdm(total=len(runs), initial=len(runs) - len(todo), desc="sweep eval", unit="ckpt",
              disable=not progress) as bar:
        if min(workers, len(todo)) <= 1:
            for run in todo:
                log(f"sweep: evaluating {run.name}")
                evaluate_one(run, out_dir, cfg)
                bar.update()
        else:
            failures = run_jobs(evaluate_one, {r.name: (r, out_dir, cfg) for r in todo}, workers,
                                out_dir / "logs" / "eval", on_done=lambda _: bar.update())
            if failures:
                raise RuntimeError(f"{len(failures)} evaluations failed; re-run to retry them:\n" + "\n".join(failures))
    return {run.name: json.loads((eval_dir(out_dir, run) / "results.json").read_text()) for run in runs}
