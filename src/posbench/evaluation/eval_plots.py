"""PNG plots (and the same figure as PDF, for a paper) for the evaluation reports: lines, heatmaps and grouped
bars. Each suite decides what to draw (its `plots` classmethod); this file only knows how. "n/a" values are shown
as such (grey, hatched cells; missing points), never as zero.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on clusters or in CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from posbench.fileio import atomic_open  # noqa: E402
from posbench.palette import HEATMAP_RANGE, HEATMAP_SCALE, pe_colour  # noqa: E402

DPI = 120
MARKERS = ("o", "s", "^", "D", "v", "P")  # a second checkpoint of one PE: same colour, another marker


def _save(fig, path: Path) -> Path:
    with atomic_open(path, "wb") as f:  # a temp file renamed into place: never written through a link
        fig.savefig(f, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    # the same figure as a vector PDF beside it; fixed metadata, so identical inputs give identical files
    with atomic_open(path.with_suffix(".pdf"), "wb") as f:
        fig.savefig(f, format="pdf", bbox_inches="tight",
                    metadata={"Creator": None, "Producer": None, "CreationDate": None})
    plt.close(fig)
    return path


def checkpoint_colours(pes: dict[str, str]) -> dict[str, tuple[str, str]]:
    """label -> (colour, marker): each checkpoint in its PE's colour (posbench.palette, as in the app and the study
    plots); a second checkpoint of the same PE keeps the colour and takes another marker."""
    seen: dict[str, int] = {}
    out = {}
    for label, pe in pes.items():
        out[label] = (pe_colour(pe), MARKERS[seen.get(pe, 0) % len(MARKERS)])
        seen[pe] = seen.get(pe, 0) + 1
    return out


def lines(path: Path, series: dict[str, tuple[list[tuple[float, float]], str, tuple[str, str]]], xlabel: str,
          ylabel: str, title: str, logx: bool = False, logy: bool = False,
          marks: dict[str, float] | None = None) -> Path:
    """One line per series: label -> (points (x, y), line style, (colour, marker)) (`checkpoint_colours`);
    `marks`: vertical lines named in the legend (e.g. the training length)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, x in (marks or {}).items():  # named in the legend: a label inside the axes sat over the curves
        ax.axvline(x, color="grey", linestyle=":", linewidth=1, label=label)
    for label, (points, style, (colour, marker)) in series.items():
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, style, color=colour, marker=marker, markersize=3, label=label)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(True, alpha=0.3)
    if series or marks:
        ax.legend(fontsize=7)
    return _save(fig, path)


def heatmaps(path: Path, grids: dict[str, np.ndarray], xticks: list[str], yticks: list[str], xlabel: str,
             ylabel: str, title: str) -> Path:
    """One panel per label; grid[y, x] in [0, 1], NaN = n/a; drawn in percent on the app's scale
    (palette.HEATMAP_SCALE, 0-100)."""
    n = max(1, len(grids))
    fig, axes = plt.subplots(1, n, figsize=(1.2 + 0.7 * len(xticks) * n + 1.0, 0.5 * len(yticks) + 1.8),
                             squeeze=False)
    cmap = matplotlib.colormaps[HEATMAP_SCALE].with_extremes(bad="lightgrey")
    image = None
    for i, (ax, (label, grid)) in enumerate(zip(axes[0], grids.items(), strict=False)):
        grid = 100 * np.asarray(grid, dtype=float)
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=HEATMAP_RANGE[0], vmax=HEATMAP_RANGE[1],
                          aspect="auto", origin="upper")
        for (y, x), v in np.ndenumerate(grid):
            text = "n/a" if np.isnan(v) else f"{v:.0f}"
            ax.text(x, y, text, ha="center", va="center", fontsize=7, color="black" if np.isnan(v) or v > 50
                    else "white")
        ax.set_xticks(range(len(xticks)), xticks, rotation=45, fontsize=7)
        ax.set_yticks(range(len(yticks)), yticks, fontsize=7)
        ax.set(xlabel=xlabel, ylabel=ylabel if i == 0 else "", title=label)
    if image is not None:
        fig.colorbar(image, ax=axes[0].tolist(), label="accuracy %", shrink=0.8)
    fig.suptitle(title)
    return _save(fig, path)


# a chance marker's shape by the unit it is counted in, so two units in one panel are told apart
CHANCE_MARKERS = {"whole answer": "_", "answer token": "x"}


def grouped_bars(path: Path, panels: dict[str, dict[str, list[float | None]]], groups: list[str], ylabel: str,
                 title: str, chance: dict[str, dict[str, list[float | None]]] | None = None,
                 chance_units: dict[str, str] | None = None) -> Path:
    """One panel per label; in each, for every group (e.g. a task) one bar per series (e.g. ID, OOD).
    A None value is written as "n/a" where its bar would be, a 0 as "0" (a bar of height 0 draws nothing), and
    a panel whose every measured value is 0 says "no correct answers". `chance` (same shape as `panels`) marks
    each bar's chance level, measured the way the bar is: `chance_units` names a series' unit ("answer token"
    beside a share of answer tokens right; default "whole answer", beside exact match), and each unit gets its own
    marker and legend entry, so a bar is never drawn against another unit's chance."""
    n = max(1, len(panels))
    fig, axes = plt.subplots(n, 1, figsize=(max(6.0, 0.55 * len(groups) * 2 + 2), 3.2 * n), squeeze=False)
    for ax, (label, series) in zip(axes[:, 0], panels.items(), strict=False):
        width = 0.8 / max(1, len(series))
        x = np.arange(len(groups))
        marked: set[str] = set()
        for k, (name, values) in enumerate(series.items()):
            pos = x - 0.4 + width * (k + 0.5)
            heights = [0.0 if v is None else v for v in values]
            bars = ax.bar(pos, heights, width, label=name)
            for p, v in zip(pos, values, strict=True):
                if v is None or v == 0:
                    ax.text(p, 0.02, "n/a" if v is None else "0", ha="center", va="bottom",
                            rotation=90 if v is None else 0, fontsize=6, color=bars.patches[0].get_facecolor())
            levels = (chance or {}).get(label, {}).get(name)
            if levels:
                at = [(p, c) for p, c in zip(pos, levels, strict=True) if c is not None]
                unit = (chance_units or {}).get(name, "whole answer")
                if at:
                    ax.scatter(*zip(*at, strict=True), marker=CHANCE_MARKERS.get(unit, "_"), color="black", s=60,
                               zorder=3, label=None if unit in marked else f"chance ({unit})")
                    marked.add(unit)
        measured = [v for values in series.values() for v in values if v is not None]
        if measured and not any(measured):
            ax.text(0.5, 0.6, "no correct answers", transform=ax.transAxes, ha="center", va="center", fontsize=10,
                    color="dimgrey")
        ax.set_xticks(x, groups, rotation=30, ha="right", fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set(ylabel=ylabel, title=label)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside: long labels
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)
