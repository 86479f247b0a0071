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


def test_each_bar_stands_beside_the_chance_of_its_own_unit(tmp_path, figures):
    """Answer tokens right (per-token chance 50% on a yes/no task) beside a whole answer's chance (near 0) would
    draw a below-chance share above its marker: the beyond bars get the chance of one answer token."""
    cells = [{**cell("k_back", "id", 0.75), "chance_whole_answer": 3e-6},
             {**cell("k_back", "ood", 0.5, beyond=0.25), "chance_whole_answer": 3e-6}]
    result = {"splits": ["id", "ood"], "shots": [0], "train_len": 16, "cells": cells}
    Algorithmic.plots({"nano_rope": result}, tmp_path)
    ax = figures["algorithmic_id_ood.png"].axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "chance (whole answer)" in labels and "chance (answer token)" in labels
    marks = {c.get_label(): [tuple(xy) for xy in c.get_offsets()] for c in ax.collections}
    assert [y for _, y in marks["chance (answer token)"]] == [0.5]  # beside the 0.25 beyond bar: below chance
    md = Algorithmic.markdown({**result, "n_examples": 4, "demo_split": "id"})
    header, _, row = md.split("\n\n")[1].splitlines()[:3]
    assert "chance per answer token" in header and "| 50.0% |" in row


def test_each_eval_plot_is_also_written_as_a_pdf(tmp_path):
    """Item 4: eval's own figures come as a vector PDF beside each PNG, as the study and sweep figures
    do, with fixed metadata so identical inputs give identical files."""
    series = {"nano_rope": ([(64.0, 5.0), (128.0, 6.5)], "-", ("C0", "o"))}
    png = eval_plots.lines(tmp_path / "ppl_vs_length.png", series, "context length (tokens)", "perplexity", "t")
    pdf = png.with_suffix(".pdf")
    assert png.read_bytes()[:4] == b"\x89PNG" and pdf.read_bytes()[:5] == b"%PDF-"
    first = pdf.read_bytes()
    eval_plots.lines(tmp_path / "ppl_vs_length.png", series, "context length (tokens)", "perplexity", "t")
    assert pdf.read_bytes() == first


def test_a_marked_length_is_named_in_the_legend_not_written_over_the_curves(tmp_path, figures):
    """Item 6: the training-length label stood upright inside the plot, over the data; it is the dotted line's
    legend entry now."""
    series = {"nano_rope": ([(64.0, 5.0), (128.0, 6.5)], "-", ("C0", "o"))}
    eval_plots.lines(tmp_path / "ppl_vs_length.png", series, "context length (tokens)", "perplexity", "t",
                     marks={"training length (64)": 64.0})
    ax = figures["ppl_vs_length.png"].axes[0]
    assert not [t.get_text() for t in ax.texts]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["training length (64)", "nano_rope"]
