#!/usr/bin/env python
"""Do two runs of a study reach the same conclusions? Exit 0 when they do, 1 with one line per difference.

    python scripts/compare_studies.py runs/qs_separate runs/qs_batched     # two --out dirs (or results.json files)

Same "cannot be told apart" pairs and the same orderings of the pairs that can be told apart at the
confidence (default 0.95, paired bootstrap over seeds on --metric, as report.md), and every row's mean of
each metric inside the other run's CI (posbench/studies/study_compare.py).
"""

from __future__ import annotations

import argparse

from posbench.cli.errors_cli import cli_entry
from posbench.studies.study_compare import NUMBERS, compare, read_cells, verdicts


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before", help="a study's output directory or results.json (the reference)")
    p.add_argument("after", help="the same study run another way")
    p.add_argument("--metric", default="ood_beyond_acc", choices=NUMBERS,
                   help="metric of the pair verdicts (default ood_beyond_acc)")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--n-boot", type=int, default=10000)
    args = p.parse_args(argv)
    if not 0 < args.confidence < 1 or args.n_boot < 100:  # a usage error (2), not "the studies differ" (1)
        p.error(f"--confidence must be in (0, 1) and --n-boot >= 100, got {args.confidence} and {args.n_boot}")
    before, after = read_cells(args.before), read_cells(args.after)
    problems = compare(before, after, args.metric, args.confidence, args.n_boot)
    pairs = verdicts(before, args.metric, args.confidence, args.n_boot)
    apart = sum(v == "~" for v in pairs.values())
    if problems:
        print(f"{len(problems)} differences:\n" + "\n".join(problems))
        return 1
    print(f"same conclusions: {len(before)} cells; {len(pairs)} PE pairs ({apart} cannot be told apart at "
          f"{args.confidence:.0%}, the rest ordered alike); every row's {', '.join(NUMBERS)} inside the other "
          f"run's CI")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
