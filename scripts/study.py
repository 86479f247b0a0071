#!/usr/bin/env python
"""Run a positional-encoding study on synthetic tasks and write report.md, plots and results.

    python scripts/study.py quickstart                        # built-in preset, minutes on a laptop CPU
    python scripts/study.py configs/study/full.yaml --out runs/full --workers 4
    python scripts/study.py quickstart --seeds 0 1 2 3 4      # any preset with other seeds
    POSBENCH_STUDY_SMOKE=1 python scripts/study.py quickstart # the same grid in seconds (CI; numbers meaningless)

Re-running the same command skips finished cells. The command is `posbench study` (posbench/cli/study.py).
"""

from posbench.cli.study import main

if __name__ == "__main__":
    raise SystemExit(main())
