"""What the eval PNGs say about accuracy: the algorithmic bars name each accuracy (whole-answer exact match ID,
OOD over all positions, answer tokens beyond the training length), never "OOD" alone; n/a written, not 0."""

import pytest

from posbench.evaluation import eval_plots
from posbench.evaluation.suites.algorithmic import Algorithmic
from tests.conftest import catch_saved_figures


@pytest.fixture
def figures(monkeypatch):
    return catch_saved_figures(monkeypatch, eval_plots)


def cell(task, split, acc, beyond=None):
    return {"task": task, "split": split, "shots": 0, "accuracy": acc, "beyond_accuracy": beyond,
            "n_beyond": 0 if beyond is None else 4, "chance_per_token": 0.5}


def test_algorithmic_bars_name_each_accuracy(tmp_path, figures):
    result = {"splits": ["id", "ood"], "shots": [0], "train_len": 16,
              "cells": [cell("copy", "id", 0.75), cell("copy", "ood", 0.5, beyond=0.25),
                        cell("sort", "id", 1.0), cell("sort", "ood", None)]}
    Algorithmic.plots({"nano_rope": result}, tmp_path)
    ax = figures["algorithmic_id_ood.png"].axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert all("beyond" in t or "all positions" in t for t in labels if "OOD" in t), labels
    assert "OOD beyond train length (answer tokens right)" in labels
    bars = {c.get_label(): [round(b.get_height(), 6) for b in c] for c in ax.containers}
    assert bars["OOD beyond train length (answer tokens right)"][0] == 0.25
    assert [t.get_text() for t in ax.texts].count("n/a") == 2  # sort: OOD exact match and beyond are n/a
