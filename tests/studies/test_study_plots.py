"""What the study PNGs say: every accuracy is labelled as the one it is (beyond the training length, or all
positions of the OOD examples; never "OOD" alone), the beyond-length accuracy is drawn, n/a is written
rather than drawn as 0, and each PE has the palette's colour. Read from the matplotlib figures themselves
(caught before `_save` closes them)."""

from dataclasses import replace

import matplotlib.colors as mcolors
import pytest

from posbench.palette import pe_colour
from posbench.studies import study_plots
from posbench.studies.cell_result import parse_cell


def cell(pe, seed, id_acc, ood_acc, beyond):
    """A hand-made cell in the old keyless format (cell_result's migration reads it)."""
    return parse_cell({
            "cell_id": f"k_back_{pe}_s{seed}", "task": "k_back", "pe": pe, "seed": seed, "axes": {}, "chance": 0.5,
            "id_acc": id_acc, "ood_acc": ood_acc, "ood_beyond_acc": beyond, "seq_len": 4,
            "curve": [{"step": 5, "id_acc": id_acc / 2, "ood_acc": ood_acc / 2, "ood_beyond_acc": beyond / 2},
                      {"step": 10, "id_acc": id_acc, "ood_acc": ood_acc, "ood_beyond_acc": beyond}],
            "acc_by_length": {"3": id_acc, "6": ood_acc}, "ood_by_position": [None, 1.0, 1.0, 1.0, 0.5, 0.5],
            "attention": {"tokens": [], "probs": []}})


# the learned table at chance beyond the training length, flattered by its in-range positions (the case)
RESULTS = [cell("learned", 0, 1.0, 0.8, 0.5), cell("learned", 1, 1.0, 0.8, 0.5),
           cell("rope", 0, 1.0, 0.9, 0.75), cell("rope", 1, 1.0, 0.9, 0.75)]


@pytest.fixture
def figures(monkeypatch):
    caught = {}
    save = study_plots._save

    def keep(fig, out_dir, name, *args, **kwargs):
        caught[name] = fig
        return save(fig, out_dir, name, *args, **kwargs)

    monkeypatch.setattr(study_plots, "_save", keep)
    return caught


def texts(fig) -> list[str]:
    """Every piece of text a reader sees: titles, axis labels, legends, free text, the figure's own."""
    out = [t.get_text() for t in fig.texts]
    for legend in fig.legends:
        out += [t.get_text() for t in legend.get_texts()]
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.texts]
        if ax.get_legend():
            out += [t.get_text() for t in ax.get_legend().get_texts()]
    return [t for t in out if t]


def unlabelled_ood(found: list[str]) -> list[str]:
    """Texts that say OOD without saying which OOD accuracy."""
    return [t for t in found if "OOD" in t and not any(w in t for w in ("beyond", "all positions", "OOD examples",
                                                                        "ID and OOD examples"))]


def test_bars_lead_with_beyond_and_label_all_positions(tmp_path, figures):
    study_plots.id_ood_bars(RESULTS, tmp_path, 0.95)
    found = texts(figures["id_ood_bars.png"])
    assert "OOD beyond train length" in found and "OOD, all positions" in found
    assert unlabelled_ood(found) == [], found
    ax = figures["id_ood_bars.png"].axes[0]
    heights = sorted(round(p.get_height(), 6) for p in ax.patches)
    assert 50.0 in heights and 80.0 in heights  # learned: 50% beyond the training length, 80% all positions
    learned = [p for p in ax.patches if mcolors.to_hex(p.get_edgecolor()) == pe_colour("learned")]
    assert sorted(round(p.get_height(), 6) for p in learned) == [50.0, 80.0, 100.0]


def test_learning_curves_draw_the_beyond_length_accuracy(tmp_path, figures):
    study_plots.learning_curves(RESULTS, tmp_path, 0.95)
    fig = figures["learning_curves.png"]
    assert unlabelled_ood(texts(fig)) == [], texts(fig)
    beyond = next(ax for ax in fig.axes if "beyond train length" in ax.get_title())
    lines = {mcolors.to_hex(ln.get_color()): list(ln.get_ydata()) for ln in beyond.lines if len(ln.get_xdata()) == 2}
    assert lines[pe_colour("learned")] == pytest.approx([25.0, 50.0])
    assert lines[pe_colour("rope")] == pytest.approx([37.5, 75.0])
    assert any("all positions" in ax.get_title() for ax in fig.axes)


def test_cells_without_the_beyond_metric_say_na(tmp_path, figures):
    old = [replace(c, ood_beyond_acc=None, curve=[replace(p, ood_beyond_acc=None) for p in c.curve])
           for c in RESULTS]
    study_plots.learning_curves(old, tmp_path, 0.95)
    study_plots.id_ood_bars(old, tmp_path, 0.95)
    curves = figures["learning_curves.png"]
    beyond = next(ax for ax in curves.axes if "beyond train length" in ax.get_title())
    assert any(t.get_text().startswith("n/a") for t in beyond.texts)
    bars = figures["id_ood_bars.png"].axes[0]
    assert [t.get_text() for t in bars.texts] == ["n/a", "n/a"]  # one per PE, where its bar would be
    assert 0.0 not in [p.get_height() for p in bars.patches]


def test_other_plots_name_their_accuracy(tmp_path, figures):
    study_plots.accuracy_vs_length(RESULTS, tmp_path, 0.95)
    study_plots.accuracy_by_position(RESULTS, tmp_path, 0.95)
    for name in ("accuracy_vs_length.png", "accuracy_by_position.png"):
        found = texts(figures[name])
        assert unlabelled_ood(found) == [], (name, found)
    assert "accuracy %, all positions" in texts(figures["accuracy_vs_length.png"])
