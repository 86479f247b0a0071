#!/usr/bin/env python
"""Do two runs of a study reach the same conclusions? Exit 0 when they do, 1 when they do not, 2 on bad input.

    python scripts/compare_studies.py runs/qs_separate runs/qs_batched     # two --out dirs (or results.json files)
    python scripts/compare_studies.py results/quickstart runs/study_quickstart   # a published result folder too

Every PE pair's verdict on --metric as report.md gives it (paired t tests over seeds, Holm over each task's
pairs: `>`/`<` shown to differ, `~` shown the same within the metric's margin, `?` inconclusive). The runs
disagree (exit 1) when a pair is ordered one way in one run and the other way in the other, or when they hold
different cells (a sequential run, whose rule chose each row's seeds, is matched by rows and judged by the verdicts
its report gave at its boundary); verdicts decided in one run and not the other, and row means outside the other run's
t-interval, are listed but are no contradiction (posbench/studies/study_compare.py). When no pair was judged in
both runs (two seeds, one PE, PEs renamed) there is nothing to agree on: it says so and exits 1. A value that is not
a finite number (NaN, inf, text) is bad input, exit 2, naming the file and the cell.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from posbench.cli.errors_cli import cli_entry
from posbench.errors import DataError
from posbench.studies.study_compare import NUMBERS, compare, read_cells, read_looks, read_published, verdicts

MAX_RESULTS_BYTES = 1 << 30  # a results.json larger than this is not a study's


def results_file(arg: str) -> Path:
    """The results.json a positional names (a study's --out directory, or the file), checked before any comparison:
    missing, too large, not JSON or without a `cells` list is one error naming the file (exit 2)."""
    path = Path(arg)
    path = path / "results.json" if path.is_dir() else path
    if not path.is_file():
        raise DataError(f"{path}: no results.json there; pass a study's --out directory, its results.json or a "
                        "published result folder (results/<name>/)")
    if path.stat().st_size > MAX_RESULTS_BYTES:
        raise DataError(f"{path}: {path.stat().st_size:,} bytes is larger than a study's results.json")
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not a study's results.json (not JSON: {e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise DataError(f"{path}: not a study's results.json (no `cells` list)")
    return path


def read_run(arg: str) -> tuple[list, dict | None]:
    """A run's cells and its sequential record (None for a fixed run): from a study's --out directory or its
    results.json, or from a published result folder (results/<name>/: cells.json, study.json, run.json)."""
    path = Path(arg)
    if path.is_dir() and not (path / "results.json").exists() and (path / "cells.json").is_file():
        return read_published(path)
    f = results_file(arg)
    return read_cells(f), read_looks(f)


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before", help="a study's output directory, results.json or published result folder (the reference)")
    p.add_argument("after", help="the same study run another way")
    p.add_argument("--metric", default="ood_beyond_acc", choices=NUMBERS,
                   help="metric of the pair verdicts (default ood_beyond_acc)")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--n-boot", type=int, default=10000)
    args = p.parse_args(argv)
    if not 0 < args.confidence < 1 or args.n_boot < 100:  # a usage error (2), not "the studies differ" (1)
        p.error(f"--confidence must be in (0, 1) and --n-boot >= 100, got {args.confidence} and {args.n_boot}")
    (before, b_looks), (after, a_looks) = read_run(args.before), read_run(args.after)
    looks = b_looks, a_looks
    ag = compare(before, after, args.metric, args.confidence, args.n_boot, looks=looks)
    counts = Counter(verdicts(before, args.metric, args.confidence, args.n_boot, looks[0]).values())
    print(f"{len(before)} cells; {ag.pairs} PE pairs judged in both runs on {args.metric} at {args.confidence:.0%}: "
          f"{ag.same} with the same verdict, {len(ag.contradictions)} contradictory, {len(ag.differ)} decided "
          f"differently without contradiction (before: {counts['>'] + counts['<']} ordered, {counts['~']} the same, "
          f"{counts['?']} inconclusive)")
    for title, lines in (("different cells", ag.cells), ("contradictions", ag.contradictions),
                         ("decided differently, not contradictory", ag.differ),
                         (f"row means outside the other run's {args.confidence:.0%} t-interval", ag.numbers)):
        if lines:
            print(f"{title} ({len(lines)}):\n  " + "\n  ".join(lines))
    if ag.nothing_judged:  # no verdict to agree on is not agreement: say so, and why it may be
        print("no PE pair was judged in both runs (a pair needs 3 paired seeds and both PEs in both runs): "
              "no conclusions to compare")
    print("same conclusions" if ag.same_conclusions else
          "not shown to reach the same conclusions" if ag.nothing_judged and not ag.cells else "the runs disagree")
    return 0 if ag.same_conclusions else 1


if __name__ == "__main__":
    raise SystemExit(main())
