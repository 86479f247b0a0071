"""A study's pair verdicts on the page, as report.md and report.tex state them (studies/report_tex.verdicts): per
task, every PE pair on OOD accuracy beyond the training length, a paired t test and an equivalence test over seeds,
Holm-adjusted over the task's pairs (for a sequential study, the verdicts its looks reached at the boundary, replayed
from its cells as its report does); beside them the report's seed calibration (seeds needed)."""

from __future__ import annotations

import streamlit as st

from posbench.studies.cell_result import CellResult
from posbench.studies.claims import DEFAULT_MARGINS
from posbench.studies.report_tex import verdicts
from posbench.studies.study_report import by_group, decided_by, looks, seed_calibration_rows

METRIC = "ood_beyond_acc"


def verdict_table(cells: list[CellResult], settings) -> list[dict]:
    """The rows the page shows: task, pair, difference in points with its interval, verdict."""
    ev = settings.eval
    rep = looks(cells, settings)  # None for fixed seeds, a study opened without its spec included
    found = verdicts(by_group(cells, METRIC), ev.confidence, ev.n_boot, DEFAULT_MARGINS.get(METRIC), decided_by(rep))
    return [{"task": v["task"], "pair": f"{v['a']} {v['relation']} {v['b']}",
             f"difference, pts [{ev.confidence:.0%} t-interval]": v["difference"], "verdict": v["verdict"]}
            for v in found]


def show_verdicts(cells: list[CellResult], settings) -> None:
    st.subheader("Which PEs differ (OOD beyond train length)")
    st.caption(f"Per task, every PE pair: paired t test over seeds ({settings.eval.confidence:.0%}) of \"they "
               f"differ\" and two one-sided tests of \"the same within +-{100 * DEFAULT_MARGINS[METRIC]:g} pts\", "
               "each Holm-adjusted over the task's pairs (docs/statistics.md). *ordered*: shown to differ, that "
               "way; *the same*: shown equivalent; *inconclusive*: neither, more seeds may tell.")
    rows = verdict_table(cells, settings)
    if rows:
        st.table(rows)
    else:
        st.info("No pair to compare yet.")
        return
    need = seed_calibration_rows(cells, settings.eval, METRIC)
    if need:  # the report's seed calibration: how many seeds would settle the closest call of each task
        st.markdown("**Seeds needed** (the report's estimate: the best two PEs of each task, if the effect and its "
                    "spread stay as these seeds show; before the Holm adjustment, which may need more)")
        st.table(need)
