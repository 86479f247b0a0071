"""Study cells -> the summary table the page shows: per (task, PE, axes) the mean and CI over seeds of
each metric, through the study's own `summarize` (the same statistics as report.md)."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

from posbench.studies.cell_result import SCALAR_FIELDS, CellResult
from posbench.studies.study_report import summarize
from posbench.studies.study_spec import StudyConfig, StudyEval

# (cell key, column label, shown as a percentage); a key absent from every cell shows as n/a
COLUMNS = (("id_acc", "ID acc %", True), ("ood_beyond_acc", "OOD beyond train length %", True),
           ("ood_acc", "OOD all positions %", True), ("id_loss", "ID loss", False), ("ood_loss", "OOD loss", False),
           ("gap", "gap (ID - OOD beyond train length, pts)", True))


def summary_rows(cells: list[CellResult], study: StudyConfig | SummarySettings) -> list[dict]:
    """One display row per (task, PE, axes), strings formatted like report.md (`mean [lo, hi]`)."""
    if not cells:
        return []
    pct = int(100 * study.eval.confidence)
    out = []
    for row in summarize(cells, study):
        shown = {"task": row["task"], "PE": row["pe"], "seeds": len(row["seeds"])}
        if row["axes"]:
            shown["axes"] = " ".join(f"{k.split('.')[-1]}={v}" for k, v in row["axes"].items())
        for key, label, as_pct in COLUMNS:
            summary = row.get(key)
            shown[f"{label} [{pct}% t-interval]"] = "n/a" if summary is None else summary.fmt(as_pct)
        beyond = row.get("ood_beyond_acc")
        if (beyond is None or beyond.mean is None) and row["gap"].mean is not None:
            # cells without the beyond metric computed their gap against all positions: said so
            shown[f"{COLUMNS[-1][1]} [{pct}% t-interval]"] += " (vs OOD all positions)"
        shown["chance %"] = f"{100 * row['chance']:.0f}" if row.get("chance") is not None else "n/a"
        out.append(shown)
    return out


def cells_csv(cells: list[CellResult]) -> str:
    """Every scalar field of the cells (so new metrics come along), one row per cell."""
    keys = sorted(SCALAR_FIELDS)
    buf = io.StringIO()
    w = csv.DictWriter(buf, keys, lineterminator="\n")
    w.writeheader()
    for c in cells:
        w.writerow({k: getattr(c, k) for k in keys})
    return buf.getvalue()


def rows_csv(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, keys, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


@dataclass
class SummarySettings:
    """What `summarize` reads of a study (its eval settings), for a study opened from disk without its spec:
    results.json does not store the spec, so the defaults apply (95% Student t-intervals)."""

    eval: StudyEval = field(default_factory=StudyEval)
    sequential: None = None  # without its spec a study's seeds read as fixed (a spec's `sequential` says otherwise)
