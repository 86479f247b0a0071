"""Heatmaps of a study's length grid (studies/length_grid.py), drawn by the eval reports' heatmap
(evaluation/eval_plots.heatmaps), one panel per row, each cell the mean over seeds: per family with a relevant item,
length x depth of that item; and one of every family by length (mean over depths)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from posbench.evaluation import eval_plots
from posbench.studies.cell_result import CellResult
from posbench.studies.long_context_report import MEAN, family_scores, grid_results


def _mean(values: list) -> float:
    return float("nan") if not values or any(v is None for v in values) else float(np.mean(values))


def depth_grids(results: list[CellResult], family: str) -> tuple[dict[str, np.ndarray], list[int], list[float]]:
    """row -> grid[depth, length] of `family`'s exact match, mean over seeds (NaN = n/a)."""
    by: dict[str, dict[tuple, list]] = defaultdict(lambda: defaultdict(list))
    for r in grid_results(results):
        for c in r.length_grid["cells"]:
            if c["family"] == family:
                by[r.pe][(c["depth"], c["length"])].append(c["exact"])
    keys = {k for cells in by.values() for k in cells}
    depths, lengths = sorted({d for d, _ in keys}), sorted({L for _, L in keys})
    grids = {row: np.array([[_mean(cells.get((d, L), [])) for L in lengths] for d in depths])
             for row, cells in by.items()}
    return grids, lengths, depths


def family_grids(results: list[CellResult]) -> tuple[dict[str, np.ndarray], list[int], list[str]]:
    """row -> grid[family, length] (mean over depths, then over seeds; NaN = n/a), the families then their mean."""
    by: dict[str, list[dict]] = defaultdict(list)
    for r in grid_results(results):
        by[r.pe].append(family_scores(r.length_grid))
    first = next(iter(by.values()))[0]
    names = [f for f in first if f != MEAN] + [MEAN]
    lengths = sorted(first[MEAN])
    grids = {row: np.array([[_mean([s[f].get(L) for s in seeds]) for L in lengths] for f in names])
             for row, seeds in by.items()}
    return grids, lengths, names


def long_context_plots(results: list[CellResult], out_dir: Path) -> list[str]:
    """File names (relative to out_dir) of the heatmaps; [] when no cell has a length grid."""
    grids = grid_results(results)
    if not grids:
        return []
    cells = grids[0].length_grid["cells"]
    families = list(dict.fromkeys(c["family"] for c in cells))
    depth_families = [f for f in families if len({c["depth"] for c in cells if c["family"] == f}) > 1]
    paths = []
    by_family, lengths, names = family_grids(results)
    paths.append(eval_plots.heatmaps(out_dir / "long_context_by_family.png", by_family, [str(L) for L in lengths],
                                     names, "context length (tokens)", "family", "exact match, mean over depths"))
    for family in depth_families:
        panels, lengths, depths = depth_grids(results, family)
        paths.append(eval_plots.heatmaps(out_dir / f"long_context_{family}_heatmap.png", panels,
                                         [str(L) for L in lengths], [f"{d:g}" for d in depths],
                                         "context length (tokens)", "depth of the relevant item",
                                         f"{family} (exact match)"))
    return [p.name for p in paths]
