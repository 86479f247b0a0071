#!/usr/bin/env python
"""Run a positional-encoding study on synthetic tasks and write report.md, plots and results.

    python scripts/study.py quickstart                        # built-in preset, minutes on a laptop CPU
    python scripts/study.py configs/study/full.yaml --out runs/full --workers 4
    python scripts/study.py quickstart --seeds 0 1 2 3 4      # any preset with other seeds

Re-running the same command skips finished cells.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from posbench.cli_errors import cli_entry
from posbench.studies.runner import run_study
from posbench.studies.spec import load_study


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("study", help="preset name (quickstart, full, depth_x_steps) or a study YAML file")
    p.add_argument("--out", help="output directory (default runs/study_<name>)")
    p.add_argument("--workers", type=int, help="parallel cell processes (default: the study's `workers`)")
    p.add_argument("--seeds", type=int, nargs="+", help="override the study's seeds")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    study = load_study(args.study)  # bad input: one line `error: ...` from cli_entry
    if args.seeds:
        study.seeds = args.seeds
    out = Path(args.out or f"runs/study_{study.name}")
    result = run_study(study, out, args.workers, progress=not args.no_progress)
    print(result["table"])
    print(f"\n{result['cells']} cells ({result['ran']} run now) in {result['seconds']:.0f} s; "
          f"report: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
