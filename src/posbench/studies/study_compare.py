"""Do two runs of a study reach the same conclusions? (scripts/compare_studies.py: a study before and after a
change to how it trains, e.g. seeds batched against seeds alone.)

Three checks on two lists of cell results (results.json's `cells`), at the report's confidence:
- pairs: per task (and axes), the PE pairs that cannot be told apart on `metric` (paired bootstrap over
  seeds, as report.md's section) are the same pairs;
- orderings: every pair that *can* be told apart is ordered the same way (the sign of the difference);
- numbers: each row's mean of every metric in `NUMBERS` lies inside the other run's CI for that row.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from posbench.stats import bootstrap_ci, paired
from posbench.studies.study_report import group_key

NUMBERS = ("id_acc", "ood_beyond_acc", "ood_acc", "id_loss", "ood_loss")


def _by_group(cells: list[dict], metric: str) -> dict[tuple, dict[str, dict[int, float]]]:
    out: dict[tuple, dict[str, dict[int, float]]] = defaultdict(dict)
    for r in cells:
        task, pe, axes = group_key(r)
        out[(task, axes)].setdefault(pe, {})[r["seed"]] = r.get(metric)
    return out


def verdicts(cells: list[dict], metric: str, confidence: float, n_boot: int) -> dict[tuple, str]:
    """(task, axes, pe_a, pe_b) -> "~" (cannot be told apart), ">" or "<" (a's mean above or below b's)."""
    out = {}
    for (task, axes), per_pe in _by_group(cells, metric).items():
        names = sorted(per_pe)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                c = paired(per_pe[a], per_pe[b], a, b, confidence, n_boot)
                if c.diff.mean is None:
                    continue
                out[(task, axes, a, b)] = "~" if not c.distinguishable else (">" if c.diff.mean > 0 else "<")
    return out


def _rows(cells: list[dict], confidence: float, n_boot: int) -> dict[tuple, dict]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in cells:
        groups[group_key(r)].append(r)
    return {key: {m: bootstrap_ci([c.get(m) for c in rows], confidence, n_boot) for m in NUMBERS}
            for key, rows in groups.items()}


def compare(before: list[dict], after: list[dict], metric: str = "ood_beyond_acc", confidence: float = 0.95,
            n_boot: int = 10000, slack: float = 1e-6) -> list[str]:
    """Every difference in conclusions between two runs of a study, one line each; empty when they agree.
    `slack`: how far outside a CI a mean may lie (a CI of identical seeds has width 0, and float rounding
    moves a loss in its 7th digit)."""
    problems = []
    ids_a, ids_b = {r["cell_id"] for r in before}, {r["cell_id"] for r in after}
    if ids_a != ids_b:
        problems.append(f"cells differ: only before {sorted(ids_a - ids_b)[:5]}, "
                        f"only after {sorted(ids_b - ids_a)[:5]}")
    va, vb = verdicts(before, metric, confidence, n_boot), verdicts(after, metric, confidence, n_boot)
    for key in sorted(set(va) | set(vb), key=str):
        if va.get(key) != vb.get(key):
            task, axes, a, b = key
            problems.append(f"{task}{dict(axes) or ''} {a} vs {b} on {metric}: before `{va.get(key)}`, after "
                            f"`{vb.get(key)}` (~: cannot be told apart at {confidence:.0%})")
    ra, rb = _rows(before, confidence, n_boot), _rows(after, confidence, n_boot)
    for key in sorted(set(ra) & set(rb), key=str):
        for m in NUMBERS:
            sa, sb = ra[key][m], rb[key][m]
            if sa.mean is None or sb.mean is None:
                if (sa.mean is None) != (sb.mean is None):
                    problems.append(f"{key[:2]} {m}: n/a in one run only")
                continue
            if not (sa.lo - slack <= sb.mean <= sa.hi + slack and sb.lo - slack <= sa.mean <= sb.hi + slack):
                problems.append(f"{key[0]} {key[1]}{dict(key[2]) or ''} {m}: before {sa.mean:.4g} "
                                f"[{sa.lo:.4g}, {sa.hi:.4g}], after {sb.mean:.4g} [{sb.lo:.4g}, {sb.hi:.4g}]: "
                                f"a mean outside the other run's CI")
    return problems


def read_cells(path: str | Path) -> list[dict]:
    """The cell results of a study's output directory (its results.json) or of a results.json file."""
    p = Path(path)
    p = p / "results.json" if p.is_dir() else p
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no results.json there; pass a study's --out directory or its results.json")
    return json.loads(p.read_text())["cells"]
