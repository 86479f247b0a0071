"""Run a positional-encoding study on synthetic tasks and write report.md, plots and results.

    python scripts/study.py quickstart                        # built-in preset, minutes on a laptop CPU
    python scripts/study.py configs/study/full.yaml --out runs/full --workers 4
    python scripts/study.py quickstart --seeds 0 1 2 3 4      # any preset with other seeds
    python scripts/study.py quickstart --estimate             # its wall time on this machine, nothing run
    python scripts/study.py quickstart --sequential-seeds 3:10:1   # 3 seeds, then one more per undecided row, up to 10
    python scripts/study.py long_context --device cuda --workers 4    # seeds batched, groups side by side on a GPU
    POSBENCH_STUDY_SMOKE=1 python scripts/study.py quickstart # the same grid in seconds (CI; numbers meaningless)

Re-running the same command skips finished cells. `posbench study ...` is the same command.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from posbench.cli.arg_types import count, positive_int
from posbench.cli.errors_cli import cli_entry
from posbench.presets import preset_names

SMOKE_ENV = "POSBENCH_STUDY_SMOKE"


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("study", help=f"preset name ({', '.join(preset_names('study'))}) or a study YAML file")
    p.add_argument("--out", help="output directory (default runs/study_<name>)")
    p.add_argument("--workers", type=positive_int, help="parallel cell processes (default: the study's `workers`)")
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=count, nargs="+", help="override the study's seeds (fixed: every row gets them)")
    seeds.add_argument("--sequential-seeds", metavar="START:MAX[:STEP]",
                       help="sequential seeds (docs/studies.md): every row gets START seeds, then STEP more (default "
                            "1) while a comparison it takes part in is undecided, up to MAX, each look judged at a "
                            "group-sequential boundary; e.g. 3:10:1")
    p.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu",
                   help="where every cell trains and is scored (default cpu, where the presets' sizes and times were "
                        "measured; auto: cuda when visible). On cuda the workers share the GPU, each training its "
                        "cells one at a time; a cell run on another device than a finished one's is a different cell")
    only = p.add_mutually_exclusive_group()  # two ways to train nothing
    only.add_argument("--report-only", action="store_true",
                      help="train nothing: write the report from finished cells (all of the grid, after --seeds), "
                           "e.g. cells trained on a GPU machine and copied here (give the --device they ran with)")
    only.add_argument("--estimate", action="store_true",
                      help="print the wall-time estimate of the cells still to run into --out on this machine (the "
                           "app's) and exit: nothing is trained or written")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--batch-seeds", action=argparse.BooleanOptionalAction, default=None,
                   help="train the cells that differ only in seed (or in PE options that stack) as one batched "
                        "model, each as alone up to float rounding; default: on for --device cuda (a study model "
                        "is launch-bound there), off on cpu (docs/performance.md: no faster at the presets' sizes); "
                        "--no-batch-seeds trains every cell alone")
    p.add_argument("--smoke", action="store_true",
                   help=f"shrink to 1 seed, 20 steps, 16 examples (also: {SMOKE_ENV}=1); for CI, not for results")
    args = p.parse_args(argv)
    from posbench.studies.sequential import parse_sequential
    from posbench.studies.study_runner import Interrupted, estimate_text, run_study
    from posbench.studies.study_spec import load_study, shrink_for_smoke
    from posbench.training.device import pick_device

    study = load_study(args.study)  # bad input: one line `error: ...` from cli_entry
    if args.smoke or os.environ.get(SMOKE_ENV, "") not in ("", "0"):
        study = shrink_for_smoke(study)
    if args.seeds:
        study.seeds, study.sequential = args.seeds, None
    if args.sequential_seeds:
        study.sequential = parse_sequential(args.sequential_seeds)  # bad form: one line, exit 2, before any work
        study.seeds = list(range(study.sequential.max))
    # --report-only trains nothing: the device only names which finished cells are this study's
    device = args.device if args.report_only else pick_device(
        args.device, "--device cuda but no CUDA device is visible here: run where a GPU is, or leave --device out")
    if device != "cpu":  # an override like any other: it enters the cells' specs (results.json says the device)
        study.overrides = [*study.overrides, f"train.device={device}"]
    out = Path(args.out or f"runs/study_{study.name}")
    if args.estimate:
        print(f"estimate: {estimate_text(study, out, args.workers)}")
        return 0
    batch_seeds = device == "cuda" if args.batch_seeds is None else args.batch_seeds
    argv_given = sys.argv[1:] if argv is None else list(argv)
    try:
        result = run_study(study, out, args.workers, progress=not args.no_progress, batch_seeds=batch_seeds,
                           report_only=args.report_only, command=" ".join(["posbench study", *argv_given]))
    except Interrupted as e:  # Ctrl-C: the report of what finished is written; re-running resumes the rest
        print(f"{e}; run the same command again to finish the rest", file=sys.stderr)
        return 130
    print(result["table"])
    print(f"\n{result['cells']} cells ({result['ran']} run now) in {result['seconds']:.0f} s; "
          f"report: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
