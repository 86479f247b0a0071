"""Plotly figures for the pages. Every line chart has one trace per PE (or checkpoint) so a click on
the legend hides or shows it, and hover shows the values. Pure functions of the loaded data.

Every PE has one colour on every chart and page (`posbench.palette`, the same as the study PNGs); the seeds
or runs of one PE share it and differ by dash, under one legend entry per PE. Legends sit below the plot, in
rows, so they never scroll; the toolbar stands upright at the right edge, clear of the title. Accuracy is
named as the one it is: *OOD beyond train length* (targets past the training length only: the headline) or
*OOD, all positions*; never "OOD" alone. The accuracy curves carry the study PNGs' band (the same
`stats.interval` over seeds, clipped to [0, 1]); reference lines (chance, the training length) are named in the
legend, never written over the data.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import plotly.graph_objects as go

from posbench.palette import HEATMAP_RANGE, HEATMAP_SCALE, pe_colour, seed_dash
from posbench.stats import interval
from posbench.studies.cell_result import CellResult, CurvePoint

# learning-curve metrics (key in a cell's curve rows -> what the chart calls it), the headline first
CURVE_LABELS = {"ood_beyond_acc": "OOD beyond train length", "id_acc": "ID", "ood_acc": "OOD, all positions"}
TOOLBAR_W = 44  # px at the right edge for the upright toolbar
ACC = (0.0, 1.0)  # an accuracy's range: its interval is clipped to it, as the PNGs' are
N_BOOT = 2000  # the PNGs' resamples, for a method that resamples (the default t-interval does not)


def _values_by_step(curves: list[list[CurvePoint]], key: str) -> tuple[list, dict]:
    """The steps to draw and each one's values of `key` (one of cell_result.CURVE_METRICS) over seeds."""
    by_step = defaultdict(list)
    for curve in curves:
        for point in curve:
            if getattr(point, key) is not None:
                by_step[point.step].append(getattr(point, key))
    steps = sorted(by_step)
    if len(steps) >= 3 and steps[-1] - steps[-2] < (steps[-2] - steps[-3]) / 2:
        # a run whose steps are not a multiple of the snapshot interval has its last periodic snapshot right
        # before the final one (300 and 301): drawn as a doubled end point. The final model's is the result
        steps.pop(-2)
    return steps, by_step


def _band(fig: go.Figure, xs: list, per_x: list[list[float]], colour: str, group: str, confidence: float,
          visible: bool | str = True) -> None:
    """The interval over seeds at each x as a filled area under the PE's legend entry (toggled with its line),
    in percent; nothing where no x has an interval (one seed: the points alone, as the PNGs draw them)."""
    stats = [interval(v, confidence, n_boot=N_BOOT, bounds=ACC) for v in per_x]
    if all(s.lo is None for s in stats):
        return
    lo, hi = [100 * s.band()[0] for s in stats], [100 * s.band()[1] for s in stats]
    fig.add_trace(go.Scatter(x=list(xs) + list(xs)[::-1], y=hi + lo[::-1], fill="toself", mode="lines",
                             line=dict(color=colour, width=0), fillcolor=colour, opacity=0.2, name=group,
                             legendgroup=group, showlegend=False, hoverinfo="skip", visible=visible))


def _layout(fig: go.Figure, title: str, x: str, y: str, height: int = 420) -> go.Figure:
    """Title top left on its own band, the toolbar upright at the right edge (not over the title), the legend
    in rows below the plot (wraps instead of scrolling)."""
    fig.update_layout(title=dict(text=_wrap(title), x=0, xanchor="left", y=0.98, yanchor="top", font=dict(size=14)),
                      xaxis_title=x, yaxis_title=y, legend_title="", height=height, showlegend=True,
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.2, yanchor="top"),
                      modebar=dict(orientation="v"), margin=dict(l=50, r=TOOLBAR_W, t=70, b=40),
                      hovermode="x unified")
    return fig


def _wrap(title: str, width: int = 50) -> str:
    """A long title's parenthesis on a second, smaller line: a half-width chart cuts no title short."""
    head, sep, rest = title.partition(" (")
    return f"{head}<br><sup>({rest}</sup>" if sep and len(title) > width else title


def _legend_entry(fig: go.Figure, name: str, dash: str, colour: str) -> None:
    """A reference line's name in the legend (a trace with no points): written inside the plot it sat over the
    curves."""
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=name, line=dict(color=colour, dash=dash),
                             hoverinfo="skip"))


def _chance_line(fig: go.Figure, chances: list[float | None]) -> None:
    """The task's chance per target position (a cell's `chance`, the unit these charts measure; the first known of
    `chances`), dotted, as the study PNGs draw it, named in the legend."""
    chance = next((c for c in chances if c is not None), None)
    if chance is not None:
        fig.add_hline(y=100 * chance, line_dash="dot", line_color="grey")
        _legend_entry(fig, f"chance ({100 * chance:.3g}%)", "dot", "grey")


def _by_pe(cells: list[CellResult]) -> dict[str, list[CellResult]]:
    """Cells grouped by PE in the order they come (the study's own order, as in its PNGs' legends)."""
    out: dict[str, list[CellResult]] = {}
    for c in cells:
        out.setdefault(c.pe, []).append(c)
    return out


def _na_note(fig: go.Figure, text: str) -> None:
    fig.add_annotation(text=text, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font=dict(color="grey"))


def learning_curves(cells: list[CellResult], task: str, key: str = "ood_beyond_acc",
                    visible: set[str] | None = None, confidence: float = 0.95) -> go.Figure:
    """Accuracy at the evaluated checkpoints, mean over seeds with the interval band at `confidence`, one trace
    per PE (legend click toggles both)."""
    fig = go.Figure()
    of_task = [c for c in cells if c.task == task]
    by_pe = {pe: [c.curve for c in group] for pe, group in _by_pe(of_task).items()}
    drawn = False
    for pe, curves in by_pe.items():
        steps, by_step = _values_by_step(curves, key)
        drawn = drawn or bool(steps)
        shown = True if visible is None or pe in visible else "legendonly"
        fig.add_trace(go.Scatter(x=steps, y=[100 * float(np.mean(by_step[s])) for s in steps], mode="lines+markers",
                                 name=pe, legendgroup=pe, line=dict(color=pe_colour(pe)), visible=shown))
        if steps:
            _band(fig, steps, [by_step[s] for s in steps], pe_colour(pe), pe, confidence, shown)
    label = CURVE_LABELS.get(key, key)
    if by_pe and not drawn:
        _na_note(fig, f"n/a: these cells did not record {label} accuracy at each checkpoint")
    _chance_line(fig, [c.chance for c in of_task])
    return _layout(fig, f"{task}: accuracy during training, {label} (mean over seeds, {confidence:.0%} interval "
                        "band)", "step", "accuracy %")


def loss_curves(series: dict[str, list[dict]], title: str = "training loss", groups: dict[str, str] | None = None,
                dashes: dict[str, int] | None = None, legend_by_group: bool = True) -> go.Figure:
    """One trace per name (a cell, a checkpoint's run): rows of {step, loss}. `groups`: name -> PE; the
    traces of one PE share its colour and differ by dash (`dashes[name]`, a seed's index, else their order);
    with `legend_by_group` they share one legend entry (a click toggles them all), else each has its own."""
    fig = go.Figure()
    groups, dashes = groups or {}, dashes or {}
    seen: dict[str, int] = defaultdict(int)
    for name, rows in series.items():
        group = groups.get(name, name)
        k = seen[group]
        seen[group] += 1
        # one logged step (a cell that just started) is a marker: a line of one point draws nothing
        fig.add_trace(go.Scatter(x=[r["step"] for r in rows], y=[r["loss"] for r in rows],
                                 mode="lines" if len(rows) > 1 else "markers",
                                 name=group if legend_by_group else name, legendgroup=group if legend_by_group
                                 else name, showlegend=k == 0 or not legend_by_group,
                                 line=dict(color=pe_colour(group), dash=seed_dash(dashes.get(name, k))),
                                 hovertemplate=f"{name}: %{{y:.3f}}<extra></extra>"))
    fig = _layout(fig, title, "step", "loss")
    fig.update_layout(hovermode="closest")  # one line's value: a unified hover over dozens of cells is a wall
    return fig


# how each accuracy's bars are filled (the colour is the PE's): the headline solid, ID light, all positions hatched
BAR_METRICS = (("id_acc", "ID (light)", dict(opacity=0.45)),
               ("ood_beyond_acc", "OOD beyond train length (solid)", dict()),
               ("ood_acc", "OOD, all positions (hatched)", dict(marker_pattern_shape="/")))


def id_ood_bars(rows: list[dict], task: str) -> go.Figure:
    """Mean accuracy per PE with its CI as error bars; `rows` from studies.report.summarize. A metric that is
    n/a for a PE has no bar and says "n/a" where it would be."""
    fig = go.Figure()
    rows = [r for r in rows if r["task"] == task]
    for key, label, style in BAR_METRICS:
        xs, ys, lo, hi, text, shown = [], [], [], [], [], []
        for r in rows:
            s = r.get(key)
            xs.append(r["pe"])
            na = s is None or s.mean is None
            ys.append(0 if na else 100 * s.mean)  # an n/a bar has no height and says n/a, on hover too
            lo.append(0 if na else 100 * (s.mean - s.band()[0]))
            hi.append(0 if na else 100 * (s.band()[1] - s.mean))
            text.append("n/a" if na else "")
            shown.append("n/a" if na else s.fmt())
        fig.add_trace(go.Bar(x=xs, y=ys, name=label, text=text, textposition="outside", customdata=shown,
                             hovertemplate=f"{label}: %{{customdata}}<extra></extra>",
                             marker=dict(color=[pe_colour(x) for x in xs], line=dict(color=[pe_colour(x) for x in xs],
                                                                                     width=1)),
                             error_y=dict(type="data", symmetric=False, array=hi, arrayminus=lo), **style))
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 105])
    _chance_line(fig, [r.get("chance") for r in rows])  # summarize's rows carry the task's chance
    return _layout(fig, f"{task}: accuracy per target position (bars: mean over seeds, whiskers: CI)", "PE",
                   "accuracy %")


def per_position(cells: list[CellResult], task: str, confidence: float = 0.95) -> go.Figure:
    """The OOD examples' accuracy at each target position, mean over seeds with the interval band at
    `confidence`; a dashed line at the training length (right of it: beyond it), named in the legend."""
    fig = go.Figure()
    of_task = [c for c in cells if c.task == task and c.ood_by_position]
    by_pe = {pe: [c.ood_by_position for c in group] for pe, group in _by_pe(of_task).items()}
    train_len = next((c.seq_len for c in reversed(of_task) if c.seq_len), None)
    for pe, lists in by_pe.items():
        width = max(len(v) for v in lists)
        vals, per_t = [], []
        for t in range(width):
            got = [v[t] for v in lists if t < len(v) and v[t] is not None]
            vals.append(100 * float(np.mean(got)) if got else None)
            per_t.append(got)
        fig.add_trace(go.Scatter(x=list(range(width)), y=vals, mode="lines", name=pe, legendgroup=pe,
                                 connectgaps=False, line=dict(color=pe_colour(pe))))
        xs = [t for t in range(width) if per_t[t]]
        if xs:
            _band(fig, xs, [per_t[t] for t in xs], pe_colour(pe), pe, confidence)
    if train_len:
        fig.add_vline(x=train_len - 0.5, line_dash="dash", line_color="black")
        _legend_entry(fig, "training length (right: beyond it)", "dash", "black")
    _chance_line(fig, [c.chance for c in of_task])
    return _layout(fig, f"{task}: OOD examples, accuracy at each target position (mean over seeds, "
                        f"{confidence:.0%} interval band)", "target position", "accuracy %")


def attention_map(probs_QK: list[list[float]], q_labels: list[str], k_labels: list[str], title: str,
                  q_start: int = 0) -> go.Figure:
    """One head's attention probabilities; axis labels are `position:token` so repeated tokens stay apart.
    `q_start`: the position of the first query row, so rows and columns count positions from the same origin."""
    ql = [f"{q_start + i}:{t}" for i, t in enumerate(q_labels)] if q_labels else None
    kl = [f"{i}:{t}" for i, t in enumerate(k_labels)] if k_labels else None
    fig = go.Figure(go.Heatmap(z=probs_QK, x=kl, y=ql, colorscale=HEATMAP_SCALE.capitalize(), zmin=0, zmax=1,
                               # below the map, as the retrieval heatmap's: the upright toolbar owns the right edge
                               colorbar=dict(title="p", orientation="h", y=-0.25, yanchor="top", thickness=12),
                               hovertemplate="query %{y}<br>key %{x}<br>p=%{z:.3f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title=dict(text=title, x=0, xanchor="left"), xaxis_title="key", yaxis_title="query",
                      height=560, modebar=dict(orientation="v"), margin=dict(l=40, r=TOOLBAR_W, t=60, b=40))
    return fig


def payload_pe(payload: dict) -> str:
    """The PE a checkpoint was trained with (its config in eval.py's results.json), else its label."""
    pe = ((payload.get("config") or {}).get("pe") or {}).get("name")
    return str(pe) if pe else str(payload.get("label", "?"))


def ppl_vs_length(payloads: list[dict], protocol: str) -> go.Figure:
    """Perplexity at each evaluated length, one trace per checkpoint in its PE's colour (two checkpoints of one
    PE: two dashes); n/a lengths leave a gap."""
    fig = go.Figure()
    seen: dict[str, int] = defaultdict(int)
    ticks: set[int] = set()
    for p in payloads:
        res = p.get("suites", {}).get("ppl")
        if not res:
            continue
        xs, ys = [], []
        for row in res.get("rows", []):
            xs.append(row["length"])
            cell = row.get(protocol) or {}
            ys.append(cell.get("ppl"))
        ticks.update(xs)
        pe = payload_pe(p)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=p.get("label", "?"),
                                 line=dict(color=pe_colour(pe), dash=seed_dash(seen[pe]))))
        seen[pe] += 1
        if res.get("train_len"):
            fig.add_vline(x=res["train_len"], line_dash="dot")
    fig.update_xaxes(type="log", tickvals=sorted(ticks), ticktext=[str(t) for t in sorted(ticks)])
    return _layout(fig, f"perplexity vs context length ({protocol}; dotted: training length)", "tokens",
                   "perplexity")


NA_GREY = "#d9d9d9"


def retrieval_heatmap(result: dict, title: str) -> go.Figure:
    """NIAH / passkey accuracy by (depth, length) on categorical axes (every evaluated length one column,
    equally wide); each cell shows its value, an n/a cell is grey with "n/a" in it and its reason on hover."""
    acc = {(c["length"], c["depth"]): c for c in result.get("cells", [])}
    lengths, depths = result.get("lengths", []), result.get("depths", [])
    xs, ys = [str(L) for L in lengths], [f"{d:g}" for d in depths]

    def value(L, d):
        a = acc.get((L, d), {}).get("accuracy")
        return None if a is None else 100 * a

    z = [[value(L, d) for L in lengths] for d in depths]
    reason = [[acc.get((L, d), {}).get("na") or "not evaluated" for L in lengths] for d in depths]
    fig = go.Figure(go.Heatmap(z=z, x=xs, y=ys, zmin=HEATMAP_RANGE[0], zmax=HEATMAP_RANGE[1],
                               colorscale=HEATMAP_SCALE.capitalize(), name="accuracy",  # the PNGs' scale
                               text=[["" if v is None else f"{v:.0f}" for v in row] for row in z],
                               texttemplate="%{text}",  # the colour bar lies below: the toolbar has the edge
                               colorbar=dict(title="acc %", orientation="h", y=-0.3, yanchor="top", thickness=12),
                               hovertemplate="length %{x}<br>depth %{y}<br>acc %{z:.0f}%<extra></extra>"))
    na = [[1 if v is None else None for v in row] for row in z]
    if any(v for row in na for v in row):
        fig.add_trace(go.Heatmap(z=na, x=xs, y=ys, colorscale=[[0, NA_GREY], [1, NA_GREY]], showscale=False,
                                 name="n/a", customdata=reason, texttemplate="%{text}",
                                 text=[["n/a" if v else "" for v in row] for row in na],
                                 hovertemplate="length %{x}<br>depth %{y}<br>n/a: %{customdata}<extra></extra>"))
    fig.update_xaxes(type="category", title="length (tokens)")
    fig.update_yaxes(type="category", title="depth")
    fig.update_layout(title=dict(text=title, x=0, xanchor="left"), height=420, modebar=dict(orientation="v"),
                      margin=dict(l=50, r=TOOLBAR_W, t=60, b=40))
    return fig
