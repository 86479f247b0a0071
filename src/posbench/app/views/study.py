"""A study's results on the page: summary table with CIs, CSV downloads, learning curves, ID/OOD bars,
per-position accuracy and attention maps. Used for a running study (its finished cells so far), a
finished one, and one opened from disk."""

from __future__ import annotations

import streamlit as st

from posbench.app import charts
from posbench.app.tables import SummarySettings, cells_csv, rows_csv, summary_rows
from posbench.app.views.verdicts import show_verdicts
from posbench.studies.cell_result import CellResult
from posbench.studies.study_report import summarize


def show_study(cells: list[CellResult], settings, key: str) -> None:
    """`settings`: the StudyConfig (its eval settings make the CIs) or SummarySettings; `key` keeps the
    widgets of two studies on one page apart."""
    if not cells:
        st.info("No finished cell yet.")
        return
    settings = settings or SummarySettings()
    rows = summary_rows(cells, settings)
    st.subheader("Summary")
    st.table(rows)
    show_verdicts(cells, settings)
    left, right = st.columns(2)
    left.download_button("Download cells CSV", cells_csv(cells), f"{key}_cells.csv", "text/csv", key=f"{key}_csv")
    right.download_button("Download summary CSV", rows_csv(rows), f"{key}_summary.csv", "text/csv",
                          key=f"{key}_sum_csv")

    tasks = list(dict.fromkeys(c.task for c in cells))  # in the order the cells come: the study's, as its PNGs
    task = st.selectbox("Task", tasks, key=f"{key}_task")
    of_task = [c for c in cells if c.task == task]
    pes = list(dict.fromkeys(c.pe for c in of_task))
    # the PE set is part of the key: while a study runs, a PE whose first cell just finished is shown
    # (a widget keeps its state under one key, so a selection made before that PE existed would hide it)
    shown = st.multiselect("PEs in the charts (or click the legend)", pes, default=pes,
                           key=f"{key}_pes_{'_'.join(sorted(pes))}")
    visible = [c for c in of_task if c.pe in shown]
    labels = {label: k for k, label in charts.CURVE_LABELS.items()}  # the headline (beyond train length) first
    split = st.radio("Learning curve: accuracy", list(labels), horizontal=True, key=f"{key}_split",
                     help="OOD beyond train length: only the OOD targets past the training length (extrapolation). "
                          "OOD, all positions: every target of the longer examples, also those inside the "
                          "training length.")
    st.plotly_chart(charts.learning_curves(visible, task, labels[split],
                                            confidence=settings.eval.confidence), key=f"{key}_lc")
    left, right = st.columns(2)
    if visible:
        left.plotly_chart(charts.id_ood_bars(summarize(visible, settings), task), key=f"{key}_bars")
    right.plotly_chart(charts.per_position(visible, task, settings.eval.confidence), key=f"{key}_pos")
    _attention(of_task, key)


def _attention(cells: list[CellResult], key: str) -> None:
    st.subheader("Attention map")
    have = [c for c in cells if c.attention is not None and c.attention.probs]
    if not have:
        st.info("These cells store no attention map.")
        return
    labels = {f"{c.pe} seed {c.seed}": c for c in have}
    cols = st.columns(3)
    cell = labels[cols[0].selectbox("Example (the first ID example, per cell)", list(labels), key=f"{key}_attn_cell")]
    att = cell.attention
    probs = att.probs
    layer = cols[1].selectbox("Layer", list(range(len(probs))), key=f"{key}_attn_layer")
    head = cols[2].selectbox("Head", list(range(len(probs[layer]))), key=f"{key}_attn_head")
    tokens = [str(t) for t in att.tokens]
    st.plotly_chart(charts.attention_map(probs[layer][head], tokens, tokens,
                                         f"{cell.task} / {cell.pe} / seed {cell.seed}: layer {layer}, "
                                         f"head {head}"), key=f"{key}_attn")
