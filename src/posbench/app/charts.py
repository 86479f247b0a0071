"""Plotly figures for the pages. Every line chart has one trace per PE (or checkpoint) so a click on
the legend hides or shows it, and hover shows the values. Pure functions of the loaded data."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import plotly.graph_objects as go


def _mean_by_step(rows_per_seed: list[list[dict]], key: str) -> tuple[list, list]:
    by_step = defaultdict(list)
    for rows in rows_per_seed:
        for r in rows:
            if r.get(key) is not None:
                by_step[r["step"]].append(r[key])
    steps = sorted(by_step)
    return steps, [float(np.mean(by_step[s])) for s in steps]


def _layout(fig: go.Figure, title: str, x: str, y: str) -> go.Figure:
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, legend_title="", height=380, showlegend=True,
                      margin=dict(l=40, r=10, t=50, b=40), hovermode="x unified")
    return fig


def learning_curves(cells: list[dict], task: str, key: str = "ood_acc", visible: set[str] | None = None) -> go.Figure:
    """Accuracy at the evaluated checkpoints, mean over seeds, one trace per PE (legend click toggles)."""
    fig = go.Figure()
    by_pe = defaultdict(list)
    for c in cells:
        if c.get("task") == task:
            by_pe[c["pe"]].append(c.get("curve") or [])
    for pe, curves in sorted(by_pe.items()):
        steps, vals = _mean_by_step(curves, key)
        fig.add_trace(go.Scatter(x=steps, y=[100 * v for v in vals], mode="lines+markers", name=pe,
                                 visible=True if visible is None or pe in visible else "legendonly"))
    label = {"id_acc": "ID", "ood_acc": "OOD"}.get(key, key)
    return _layout(fig, f"{task}: {label} accuracy during training (mean over seeds)", "step", "accuracy %")


def loss_curves(series: dict[str, list[dict]], title: str = "training loss") -> go.Figure:
    """One trace per name (a cell, a PE, a checkpoint's run): rows of {step, loss}."""
    fig = go.Figure()
    for name, rows in series.items():
        fig.add_trace(go.Scatter(x=[r["step"] for r in rows], y=[r["loss"] for r in rows], mode="lines", name=name))
    return _layout(fig, title, "step", "loss")


def id_ood_bars(rows: list[dict], task: str) -> go.Figure:
    """Mean accuracy per PE with its CI as error bars; `rows` from studies.report.summarize."""
    fig = go.Figure()
    rows = [r for r in rows if r["task"] == task]
    for key, label in (("id_acc", "ID"), ("ood_beyond_acc", "OOD beyond train length"), ("ood_acc", "OOD all")):
        xs, ys, lo, hi = [], [], [], []
        for r in rows:
            s = r.get(key)
            if s is None or s.mean is None:
                continue
            xs.append(r["pe"])
            ys.append(100 * s.mean)
            lo.append(100 * (s.mean - s.lo))
            hi.append(100 * (s.hi - s.mean))
        fig.add_trace(go.Bar(x=xs, y=ys, name=label,
                             error_y=dict(type="data", symmetric=False, array=hi, arrayminus=lo)))
    fig.update_layout(barmode="group")
    return _layout(fig, f"{task}: accuracy by PE (bars: mean over seeds, whiskers: CI)", "PE", "accuracy %")


def per_position(cells: list[dict], task: str) -> go.Figure:
    """OOD accuracy at each target position, mean over seeds; a dashed line at the training length."""
    fig = go.Figure()
    by_pe = defaultdict(list)
    train_len = None
    for c in cells:
        if c.get("task") == task and c.get("ood_by_position"):
            by_pe[c["pe"]].append(c["ood_by_position"])
            train_len = c.get("seq_len", train_len)
    for pe, lists in sorted(by_pe.items()):
        width = max(len(v) for v in lists)
        vals = []
        for t in range(width):
            got = [v[t] for v in lists if t < len(v) and v[t] is not None]
            vals.append(100 * float(np.mean(got)) if got else None)
        fig.add_trace(go.Scatter(x=list(range(width)), y=vals, mode="lines", name=pe, connectgaps=False))
    if train_len:
        fig.add_vline(x=train_len - 0.5, line_dash="dash", annotation_text="training length")
    return _layout(fig, f"{task}: OOD accuracy by position (mean over seeds)", "position", "accuracy %")


def attention_map(probs_QK: list[list[float]], q_labels: list[str], k_labels: list[str], title: str) -> go.Figure:
    """One head's attention probabilities; axis labels are `index:token` so repeated tokens stay apart."""
    ql = [f"{i}:{t}" for i, t in enumerate(q_labels)] if q_labels else None
    kl = [f"{i}:{t}" for i, t in enumerate(k_labels)] if k_labels else None
    fig = go.Figure(go.Heatmap(z=probs_QK, x=kl, y=ql, colorscale="Viridis", zmin=0, zmax=1,
                               hovertemplate="query %{y}<br>key %{x}<br>p=%{z:.3f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title=title, xaxis_title="key", yaxis_title="query", height=520,
                      margin=dict(l=40, r=10, t=50, b=40))
    return fig


def ppl_vs_length(payloads: list[dict], protocol: str) -> go.Figure:
    """Perplexity at each evaluated length, one trace per checkpoint; n/a lengths leave a gap."""
    fig = go.Figure()
    for p in payloads:
        res = p.get("suites", {}).get("ppl")
        if not res:
            continue
        xs, ys = [], []
        for row in res.get("rows", []):
            xs.append(row["length"])
            cell = row.get(protocol) or {}
            ys.append(cell.get("ppl"))
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=p.get("label", "?")))
        if res.get("train_len"):
            fig.add_vline(x=res["train_len"], line_dash="dot")
    fig.update_xaxes(type="log")
    return _layout(fig, f"perplexity vs context length ({protocol}; dotted: training length)", "tokens",
                   "perplexity")


def retrieval_heatmap(result: dict, title: str) -> go.Figure:
    """NIAH / passkey accuracy by (depth, length); n/a cells blank, their reason on hover."""
    acc = {(c["length"], c["depth"]): c for c in result.get("cells", [])}
    lengths, depths = result.get("lengths", []), result.get("depths", [])
    z = [[None if acc.get((L, d), {}).get("accuracy") is None else 100 * acc[(L, d)]["accuracy"] for L in lengths]
         for d in depths]
    text = [[acc.get((L, d), {}).get("na") or "" for L in lengths] for d in depths]
    fig = go.Figure(go.Heatmap(z=z, x=[str(L) for L in lengths], y=[f"{d:g}" for d in depths], zmin=0, zmax=100,
                               colorscale="RdYlGn", text=text,
                               hovertemplate="length %{x}<br>depth %{y}<br>acc %{z:.0f}%<br>%{text}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="length (tokens)", yaxis_title="depth", height=360,
                      margin=dict(l=40, r=10, t=50, b=40))
    return fig
