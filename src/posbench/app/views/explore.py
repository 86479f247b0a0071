"""Explore results on disk: study directories, eval outputs and sweep folders, several side by side."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import streamlit as st

from posbench.app import charts
from posbench.app.long_context_view import show_long_context
from posbench.app.outputs import EvalOutput, NotAnOutput, StudyOutput, merge_eval, open_output, report_text
from posbench.app.tables import rows_csv
from posbench.app.views.study import show_study

RETRIEVAL = (("niah", "needle in a haystack"), ("passkey", "passkey retrieval"))
# exact match of whole answers: an OOD answer counts its tokens inside the training length too
SPLITS = {"id": "ID", "ood": "OOD, all positions"}


def page() -> None:
    st.header("Explore results")
    text = st.text_area("Study directories, eval outputs, sweep folders or results.json files (one per line)",
                        key="ex_paths", placeholder="runs/study_quickstart\ncheckpoints/rope/eval/step_1000")
    studies, evals = [], []
    for line in [x.strip() for x in text.splitlines() if x.strip()]:
        try:
            out = open_output(line)
        except NotAnOutput as e:
            st.error(str(e))
            continue
        (studies if isinstance(out, StudyOutput) else evals).append(out)
    for i, s in enumerate(studies):
        st.subheader(f"Study `{s.name}` ({len(s.cells)} cells) — {s.path}")
        show_study(s.cells, s.study, key=f"ex{i}")
    if evals:
        show_eval(merge_eval(evals))


def eval_rows(payloads: list[dict]) -> list[dict]:
    """One row per (checkpoint, length): perplexity per protocol and retrieval accuracy by length, for CSV."""
    rows = []
    for p in payloads:
        suites = p.get("suites", {})
        by_len: dict[int, dict] = {}
        for row in (suites.get("ppl") or {}).get("rows", []):
            r = by_len.setdefault(row["length"], {})
            for proto in (suites["ppl"].get("protocols") or []):
                r[f"ppl_{proto}"] = (row.get(proto) or {}).get("ppl")
        for name, _ in RETRIEVAL:
            for length, acc in ((suites.get(name) or {}).get("by_length") or {}).items():
                by_len.setdefault(int(length), {})[f"{name}_acc"] = acc
        rows += [{"checkpoint": p.get("label"), "step": p.get("step"), "length": L, **v}
                 for L, v in sorted(by_len.items())]
    return rows


def algorithmic_rows(payloads: list[dict]) -> list[dict]:
    """One row per (task, split, shots), one column per checkpoint: exact match %, n/a with its reason; each
    accuracy beside the chance of its own unit (whole answers beside exact match, one answer token beside the
    answer tokens right beyond the training length)."""
    rows: dict[tuple, dict] = {}
    for p in payloads:
        for c in ((p.get("suites", {}).get("algorithmic") or {}).get("cells") or []):
            row = rows.setdefault((c["task"], c["split"], c["shots"]),
                                  {"task": c["task"], "split": SPLITS.get(c["split"], c["split"]), "shots": c["shots"],
                                   "chance (whole answer) %": _chance_pct(c.get("chance_whole_answer"))})
            label = str(p.get("label"))
            row[label] = f"n/a ({c['na']})" if c.get("na") else _pct(c.get("accuracy"))
            if c.get("n_beyond"):
                row[f"{label} beyond train length"] = _pct(c.get("beyond_accuracy"))
                row["chance per answer token %"] = _pct(c.get("chance_per_token"))
    return list(rows.values())


def _chance_pct(x) -> str:
    """Whole-answer chances run to 1e-10: two significant digits, not a rounded 0.0, and always as a plain decimal
    (a column of "50.0" and "8e-08" reads as two kinds of number)."""
    if x is None:
        return "n/a"
    if x >= 0.1:
        return f"{100 * x:.1f}"
    return np.format_float_positional(100 * x, precision=2, unique=False, fractional=False, trim="-")


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def show_eval(out: EvalOutput) -> None:
    payloads = out.payloads
    if payloads:
        st.subheader(f"Evaluation: {', '.join(str(p.get('label')) for p in payloads)}")
        protocols = sorted({proto for p in payloads for proto in (p.get("suites", {}).get("ppl") or {})
                            .get("protocols", [])})
        if protocols:
            proto = st.radio("Perplexity protocol", protocols, horizontal=True, key="ex_proto")
            st.plotly_chart(charts.ppl_vs_length(payloads, proto), key="ex_ppl")
        for name, title in RETRIEVAL:
            have = [p for p in payloads if p.get("suites", {}).get(name)]
            if not have:
                continue
            st.markdown(f"**{title}** (accuracy % by depth and length)")
            for col, p in zip(st.columns(len(have)), have):
                col.plotly_chart(charts.retrieval_heatmap(p["suites"][name], str(p.get("label"))),
                                 key=f"ex_{name}_{p.get('label')}")
        show_long_context(payloads)
        algorithmic = algorithmic_rows(payloads)
        if algorithmic:
            st.markdown("**Algorithmic tasks** (exact match of whole answers %, greedy decoding; *beyond train "
                        "length*: answer tokens predicted past the training length that are right, %)")
            st.table(algorithmic)
            st.download_button("Download algorithmic CSV", rows_csv(algorithmic), "algorithmic.csv", "text/csv",
                               key="ex_alg_csv")
        rows = eval_rows(payloads)
        if rows:
            st.download_button("Download CSV", rows_csv(rows), "eval.csv", "text/csv", key="ex_eval_csv")
    curves = {k: v for k, v in out.losses.items() if v}
    if curves:
        pes = {str(p.get("label", "?")): charts.payload_pe(p) for p in payloads}
        st.plotly_chart(charts.loss_curves(curves, "training loss (metrics.jsonl; colour: PE)", groups=pes,
                                           legend_by_group=False),
                        key="ex_loss")
    elif payloads:
        st.caption("No metrics.jsonl next to these checkpoints: no loss curves.")
    for path in out.reports:
        show_report(path)


IMAGE = re.compile(r"^!\[[^\]]*\]\(([^)\s]+)\)$")  # a report's figure line: ![name](file.png)


def show_report(path: Path) -> None:
    """A sweep's report.md as written, its figures (files in the sweep folder) shown as images."""
    try:
        text = report_text(path)
    except NotAnOutput as e:
        st.error(str(e))
        return
    with st.expander(f"Sweep report: {path}", expanded=True):
        lines: list[str] = []
        for line in text.splitlines():
            m = IMAGE.match(line.strip())
            figure = path.parent / m.group(1) if m else None
            # only the sweep's own files (a figure inside its folder), never a path that leaves it
            if figure is not None and path.parent.resolve() in figure.resolve().parents and figure.is_file():
                st.markdown("\n".join(lines))  # the text so far, then the figure where the report puts it
                st.image(str(figure))
                lines = []
            else:
                lines.append(line)
        st.markdown("\n".join(lines))
