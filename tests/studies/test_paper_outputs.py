"""Paper-ready outputs of a study: report.tex (booktabs), summary.csv beside report.md, every figure also as PDF,
and the accuracy-vs-length figure's title kept whole and its interval band drawn."""

import csv
from dataclasses import replace

import pytest
from matplotlib.collections import PolyCollection

from posbench.studies import study_plots
from posbench.studies.study_report import write_outputs
from posbench.studies.study_spec import load_study
from tests.studies.test_study_plots import cell

STUDY = ("name: p\ntasks: [{name: k_back, k: 2}]\npes: [{name: rope}, {name: learned}]\nseeds: [0, 1, 2]\n"
         "train: {steps: 4, batch_size: 2}\neval: {n_boot: 200}\n"
         "overrides: [model.d_model=16, model.n_heads=2, model.n_layers=1, model.d_ff=32]\n")
# rope beyond 0.7, 0.8, 0.9 (mean 80.0); learned 0.5 on every seed (mean 50.0): rope > learned by 30 pts on each seed
RESULTS = [cell("rope", s, 1.0, 0.9, 0.7 + 0.1 * s) for s in range(3)] + \
          [cell("learned", s, 1.0, 0.8, 0.5) for s in range(3)]


@pytest.fixture
def study(tmp_path):
    (tmp_path / "s.yaml").write_text(STUDY)
    return load_study(str(tmp_path / "s.yaml"))


def test_report_tex_and_summary_csv_beside_report_md(tmp_path, study):
    """Item 4: report.tex holds booktabs tables of the summary and the pair verdicts; summary.csv one
    row per (task, PE) with the means and interval ends (hand-computed here)."""
    out = tmp_path / "out"
    out.mkdir()
    write_outputs(out, [replace(r, id_loss=0.5, ood_loss=0.9, gap=0.2) for r in RESULTS], study, [])
    tex = (out / "report.tex").read_text()
    for rule in ("\\toprule", "\\midrule", "\\bottomrule", "\\usepackage{booktabs}"):
        assert rule in tex
    # by hand: rope's beyond-length 0.7, 0.8, 0.9: mean 80.0, sd 10, t_2 = 4.303, half width 4.303 * 10 / sqrt(3)
    # = 24.8 -> [55.2, 104.8], clipped to 100; the paired differences 20, 30, 40 give +30.0 [+5.2, +54.8]
    assert "k\\_back & rope & 100.0 [100.0, 100.0] & 80.0 [55.2, 100.0] & 90.0 [90.0, 90.0] \\\\" in tex
    assert "k\\_back & learned & 100.0 [100.0, 100.0] & 50.0 [50.0, 50.0]" in tex
    assert "k\\_back & rope $>$ learned & +30.0 [+5.2, +54.8] & ordered \\\\" in tex
    rows = {r["pe"]: r for r in csv.DictReader((out / "summary.csv").open())}
    assert float(rows["rope"]["ood_beyond_acc_mean"]) == pytest.approx(0.8)
    assert float(rows["learned"]["ood_beyond_acc_mean"]) == pytest.approx(0.5)
    assert rows["rope"]["n_seeds"] == "3" and rows["rope"]["ood_beyond_acc_lo"] != ""


def test_every_study_figure_is_also_a_pdf(tmp_path):
    """Item 4: each PNG a study writes has a PDF beside it."""
    names = study_plots.all_plots(RESULTS, tmp_path, 0.95)
    assert names
    for name in names:
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
        assert (tmp_path / name).with_suffix(".pdf").read_bytes()[:5] == b"%PDF-"


def test_accuracy_vs_length_title_fits_and_draws_the_band(tmp_path):
    """Item 4: with 2 tasks the figure's title lies inside the figure, and 3 seeds draw an interval band
    around each PE's curve."""
    two = RESULTS + [replace(r, task="sort", cell_id=r.cell_id.replace("k_back", "sort")) for r in RESULTS]
    fig = study_plots.accuracy_vs_length_figure(two, 0.95)
    fig.canvas.draw()
    box = fig.texts[0].get_window_extent()
    width, height = fig.canvas.get_width_height()
    assert box.x0 >= 0 and box.x1 <= width and box.y1 <= height
    assert all(any(isinstance(c, PolyCollection) for c in ax.collections) for ax in fig.axes)
