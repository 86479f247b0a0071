"""What the sweep PNGs say: task accuracy named as the one it is (whole-answer exact match ID and OOD over all
positions, answer tokens beyond the training length), n/a written rather than drawn as 0, one colour per PE
(the palette's), retrieval heatmaps with n/a cells shown. Read from the matplotlib figures before `_save`."""

from types import SimpleNamespace

import matplotlib.colors as mcolors
import pytest

from posbench.palette import pe_colour
from posbench.sweeps import sweep_plots
from tests.conftest import catch_saved_figures


@pytest.fixture
def figures(monkeypatch):
    return catch_saved_figures(monkeypatch, sweep_plots)


def alg(task, split, acc, beyond=None):
    return {"task": task, "split": split, "shots": 0, "accuracy": acc, "beyond_accuracy": beyond,
            "n_beyond": 0 if beyond is None else 5, "chance_per_token": 0.5}


RUNS = [SimpleNamespace(name="nano_rope_s0", pe="rope"), SimpleNamespace(name="nano_learned_s0", pe="learned")]
RESULTS = {
    "nano_rope_s0": {"suites": {"algorithmic": {"cells": [alg("copy", "id", 0.9), alg("copy", "ood", 0.4, 0.25)]},
                                "passkey": {"cells": [{"length": 256, "depth": 0.5, "accuracy": 1.0},
                                                      {"length": 1024, "depth": 0.5, "accuracy": None}]}}},
    "nano_learned_s0": {"suites": {"algorithmic": {"cells": [alg("copy", "id", 1.0), alg("copy", "ood", 0.6)]}}},
}


def test_task_accuracy_names_each_accuracy(tmp_path, figures):
    sweep_plots.task_accuracy(RUNS, RESULTS, tmp_path / "task_accuracy.png")
    fig = figures["task_accuracy.png"]
    titles = [ax.get_title() for ax in fig.axes]
    assert all("beyond" in t or "all positions" in t for t in titles if "OOD" in t), titles
    beyond = next(ax for ax in fig.axes if "beyond train length" in ax.get_title())
    bars = {mcolors.to_hex(p.get_facecolor()): p.get_height() for p in beyond.patches}
    assert bars == {pe_colour("rope"): 0.25}  # learned has no answer token past the training length here
    assert [t.get_text() for t in beyond.texts] == ["n/a"]
    ood = next(ax for ax in fig.axes if "all positions" in ax.get_title())
    assert {mcolors.to_hex(p.get_facecolor()): p.get_height() for p in ood.patches} == \
        {pe_colour("rope"): 0.4, pe_colour("learned"): 0.6}


def test_retrieval_heatmap_shows_na_cells(tmp_path, figures):
    sweep_plots.retrieval_heatmaps(RUNS, RESULTS, "passkey", tmp_path / "passkey_heatmaps.png")
    ax = figures["passkey_heatmaps.png"].axes[0]
    assert [t.get_text() for t in ax.texts] == ["100", "n/a"]  # percent, on the app's scale (palette.HEATMAP_RANGE)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["256", "1024"]
