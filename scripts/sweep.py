#!/usr/bin/env python
"""Pretrain every (size x PE x seed [x any config field]) of a sweep, evaluate the final checkpoints, and
write one comparison (report.md, results.csv, plots).

    python scripts/sweep.py cpu_demo                            # a preset from configs/sweep/, runs here
    python scripts/sweep.py cpu_demo --prepare-data             # tokenize its corpus with its task mix first
    python scripts/sweep.py cpu_demo --workers 2                # two runs at a time, one core each
    python scripts/sweep.py configs/sweep/reference.yaml --emit slurm     # an sbatch array script instead
    python scripts/sweep.py reference --emit slurm --out /shared/sweeps/ref
    python scripts/sweep.py reference --out /shared/sweeps/ref --report-only   # after the cluster jobs

Re-running the same command skips finished runs and evaluations and resumes a killed run.
Errors are one line `error: ...` with the shared exit codes (2 bad input, 4 checkpoint, 5 disk full).
The command is `posbench sweep` (posbench/cli/sweep.py).
"""

from posbench.cli.sweep import main

if __name__ == "__main__":
    raise SystemExit(main())
