"""The Explore page's long-context section (eval suite `long_context`): effective length per checkpoint as the
headline table, then the length x depth heatmap of a chosen family, one per checkpoint."""

from __future__ import annotations

import streamlit as st

from posbench.app import charts
from posbench.evaluation.suites.long_context import MEAN, LongContext


def effective_rows(payloads: list[dict]) -> list[dict]:
    """One row per family (and the mean of families), one column per checkpoint: effective length in tokens,
    `>=` when every tested length passed, n/a with its reason."""
    rows: dict[str, dict] = {}
    for p in payloads:
        lc = p["suites"]["long_context"]
        for name, fam in [*lc["families"].items(), (MEAN, lc["mean"])]:
            rows.setdefault(name, {"family": name})[str(p.get("label"))] = LongContext.effective_text(fam["effective"])
    return list(rows.values())


def collapse_na(rows: list[dict], key: str = "family") -> tuple[list[dict], list[str]]:
    """(rows, notes): a row, then a column, whose every cell is n/a leaves the table and is said once below it,
    with its reason(s) once each (a table of repeated `n/a (...)` hides the few numbers there are)."""
    is_na = lambda v: str(v).startswith("n/a")  # noqa: E731
    reasons = lambda cells: "; ".join(dict.fromkeys(str(v)[len("n/a"):].strip(" ()") for v in cells))  # noqa: E731
    notes = []
    kept = []
    for row in rows:
        cells = [v for k, v in row.items() if k != key]
        if cells and all(is_na(v) for v in cells):
            notes.append(f"{row[key]}: n/a for every checkpoint ({reasons(cells)})")
        else:
            kept.append(row)
    columns = [c for c in dict.fromkeys(k for r in kept for k in r) if c != key]
    for col in columns:
        cells = [r[col] for r in kept if col in r]
        if cells and all(is_na(v) for v in cells):
            notes.append(f"{col}: n/a in every family ({reasons(cells)})")
            kept = [{k: v for k, v in r.items() if k != col} for r in kept]
    return kept, notes


def show_long_context(payloads: list[dict]) -> None:
    have = [p for p in payloads if (p.get("suites") or {}).get("long_context")]
    if not have:
        return
    keep = have[0]["suites"]["long_context"]["keep"]
    st.markdown(f"**Long-context probes** (RULER families, lost in the middle): effective length in tokens, the "
                f"longest tested length whose exact match keeps {keep:.0%} of the in-distribution score and stays "
                "above the baseline")
    rows, notes = collapse_na(effective_rows(have))
    if rows and len(rows[0]) > 1:
        st.table(rows)
    for note in notes:
        st.caption(note)
    names = list(dict.fromkeys(n for p in have for n in p["suites"]["long_context"]["families"]))
    family = st.selectbox("Family (exact match % by depth and length)", names, key="ex_lc_family")
    shown = [p for p in have if family in p["suites"]["long_context"]["families"]]
    for col, p in zip(st.columns(len(shown)), shown):
        col.plotly_chart(charts.retrieval_heatmap(p["suites"]["long_context"]["families"][family], str(p.get("label"))),
                         key=f"ex_lc_{family}_{p.get('label')}")
