#!/usr/bin/env python
"""Pretrain every run of a sweep, evaluate the final checkpoints and write one comparison: `posbench sweep`
(posbench/cli/sweep.py has the usage; `python scripts/sweep.py --help` prints it)."""

from posbench.cli.sweep import main

if __name__ == "__main__":
    raise SystemExit(main())
