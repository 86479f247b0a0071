"""One colour per PE that a reader can tell apart: every registered PE's colour at a minimum perceptual distance
(CIE76 delta-E in CIE Lab, computed here by hand) from every other's, also under simulated deuteranopia and
protanopia, and from the white page; eval.py's PNGs and the app draw with the same palette and heatmap scale."""

import itertools
import math

import plotly.graph_objects as go

from posbench.app import charts
from posbench.evaluation import eval_plots
from posbench.evaluation.suites.ppl import Perplexity
from posbench.palette import HEATMAP_RANGE, HEATMAP_SCALE, OTHER_COLOURS, PE_COLOURS, pe_colour
from posbench.pe import PES
from tests.conftest import catch_saved_figures

MIN_DELTA_E, MIN_DELTA_E_CVD, MIN_FROM_WHITE = 20.0, 8.0, 30.0
# Machado, Oliveira & Fernandes 2009, severity 1.0, on linear sRGB
DEUTERANOPIA = ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881))
PROTANOPIA = ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998))


def linear_rgb(hex_colour: str) -> list[float]:
    srgb = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    return [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in srgb]


def lab(lin: list[float]) -> tuple[float, float, float]:
    """Linear sRGB -> CIE Lab (D65)."""
    x = 0.4124564 * lin[0] + 0.3575761 * lin[1] + 0.1804375 * lin[2]
    y = 0.2126729 * lin[0] + 0.7151522 * lin[1] + 0.0721750 * lin[2]
    z = 0.0193339 * lin[0] + 0.1191920 * lin[1] + 0.9503041 * lin[2]

    def f(t):
        return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29
    fx, fy, fz = f(x / 0.95047), f(y), f(z / 1.08883)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def seen(hex_colour: str, matrix=None) -> tuple[float, float, float]:
    lin = linear_rgb(hex_colour)
    if matrix is not None:
        lin = [min(max(sum(m * c for m, c in zip(row, lin)), 0.0), 1.0) for row in matrix]
    return lab(lin)


def test_lab_by_hand_matches_known_values():
    assert all(abs(a - b) < 0.05 for a, b in zip(seen("#ffffff"), (100, 0, 0)))
    assert all(abs(a - b) < 0.1 for a, b in zip(seen("#ff0000"), (53.24, 80.09, 67.20)))


def test_every_registered_pe_has_a_colour_far_from_every_other():
    names = sorted(PES.names())
    colours = {n: pe_colour(n) for n in names}
    for matrix, least in ((None, MIN_DELTA_E), (DEUTERANOPIA, MIN_DELTA_E_CVD), (PROTANOPIA, MIN_DELTA_E_CVD)):
        close = [(round(math.dist(seen(colours[a], matrix), seen(colours[b], matrix)), 1), a, b)
                 for a, b in itertools.combinations(names, 2)
                 if math.dist(seen(colours[a], matrix), seen(colours[b], matrix)) < least]
        assert not close, (matrix is not None, close)
    faint = [n for n in names if math.dist(seen(colours[n]), seen("#ffffff")) < MIN_FROM_WHITE]
    assert not faint  # fope was #c7e9c0, nearly invisible on white


def too_close(colours: dict[str, str]) -> list[tuple]:
    """The pairs closer than the palette's distances, in normal vision or under either simulation."""
    return [(a, b) for matrix, least in ((None, MIN_DELTA_E), (DEUTERANOPIA, MIN_DELTA_E_CVD),
                                         (PROTANOPIA, MIN_DELTA_E_CVD))
            for a, b in itertools.combinations(colours, 2)
            if math.dist(seen(colours[a], matrix), seen(colours[b], matrix)) < least]


def test_a_pe_without_a_fixed_colour_gets_one_by_rule_far_from_every_other():
    """A PE added in one file (no palette edit) or any other label: a slot chosen by the name alone, and every slot
    is as far from every fixed colour, from the other slots and from white as the fixed colours are apart."""
    for name in ("toy_log_bias", "my_new_pe", "rope_ntk_arm"):
        assert name not in PE_COLOURS and pe_colour(name) in OTHER_COLOURS and pe_colour(name) == pe_colour(name)
    assert len({pe_colour(f"new_pe_{i}") for i in range(200)}) == len(OTHER_COLOURS)  # the hash reaches them all
    for slot in OTHER_COLOURS:
        assert not [pair for pair in too_close({**PE_COLOURS, "slot": slot}) if "slot" in pair], slot
    assert not too_close({f"slot{i}": c for i, c in enumerate(OTHER_COLOURS)})
    assert all(math.dist(seen(c), seen("#ffffff")) >= MIN_FROM_WHITE for c in OTHER_COLOURS)


def test_eval_plots_draw_each_checkpoint_in_its_pes_colour(tmp_path, monkeypatch):
    figures = catch_saved_figures(monkeypatch, eval_plots)

    def ppl(pe):
        return {"pe": pe, "protocols": ["nonoverlap"], "train_len": 64,
                "rows": [{"length": L, "nonoverlap": {"ppl": 10.0 + L / 64}, "curve": None} for L in (32, 64, 128)]}
    Perplexity.plots({"a": ppl("fox"), "b": ppl("rope"), "c": ppl("rope")}, tmp_path)
    lines = figures["ppl_vs_length.png"].axes[0].get_lines()
    drawn = {line.get_label().split(" ")[0]: (line.get_color(), line.get_marker()) for line in lines
             if not line.get_label().startswith("_")}
    assert drawn["a"][0] == pe_colour("fox") and drawn["b"][0] == drawn["c"][0] == pe_colour("rope")
    assert drawn["b"][1] != drawn["c"][1]  # two checkpoints of one PE: another marker


def test_one_heatmap_scale_in_the_app_and_the_pngs(tmp_path, monkeypatch):
    figures = catch_saved_figures(monkeypatch, eval_plots)
    eval_plots.heatmaps(tmp_path / "h.png", {"m": [[0.25, float("nan")]]}, ["1", "2"], ["0.5"], "length", "depth", "t")
    image = figures["h.png"].axes[0].get_images()[0]
    assert image.get_cmap().name.startswith(HEATMAP_SCALE) and image.get_clim() == HEATMAP_RANGE
    assert "25" in [t.get_text() for t in figures["h.png"].axes[0].texts]  # percent, as the app writes it
    fig = charts.retrieval_heatmap({"lengths": [1], "depths": [0.5], "cells": [{"length": 1, "depth": 0.5,
                                                                               "accuracy": 0.25}]}, "t")
    heat = fig.data[0]
    assert isinstance(heat, go.Heatmap) and (heat.zmin, heat.zmax) == HEATMAP_RANGE
    assert heat.colorscale == go.Heatmap(colorscale=HEATMAP_SCALE.capitalize()).colorscale
