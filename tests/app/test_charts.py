"""The app's plotly figures as a reader meets them: one colour per PE on every chart (the study PNGs' too),
legends that fit, titles clear of the toolbar, heatmaps with one column per evaluated length and n/a cells
shown, every accuracy named as the one it is."""

import json
from dataclasses import replace

import plotly.io as pio
import pytest

from posbench.app import charts
from posbench.palette import OTHER_COLOURS, PE_COLOURS, pe_colour, seed_dash
from posbench.stats import bootstrap_ci
from posbench.studies.cell_result import parse_cell
from tests.app.helpers import eval_payload

PES = ["sinusoidal", "learned", "rope", "alibi", "none"]


def typed(rows: list[dict]) -> list:
    """Hand-made cells (the old keyless format, lifted by cell_result's migration) as the charts take them."""
    return [parse_cell({"cell_id": f"{r['task']}_{r['pe']}_s{r.get('seed', 0)}", "seed": 0, "axes": {}, **r})
            for r in rows]


def cells():
    out = []
    for pe in PES:
        for seed in range(3):
            out.append({"cell_id": f"k_back_{pe}_s{seed}", "task": "k_back", "pe": pe, "seed": seed, "seq_len": 4,
                        "curve": [{"step": 5, "id_acc": 0.5, "ood_acc": 0.5, "ood_beyond_acc": 0.25},
                                  {"step": 10, "id_acc": 1.0, "ood_acc": 0.8, "ood_beyond_acc": 0.5}],
                        "ood_by_position": [None, 1.0, 1.0, 1.0, 0.5, 0.5]})
    return typed(out)


def summary_rows():
    s = bootstrap_ci([0.5, 0.7])
    return [{"task": "k_back", "pe": pe, "id_acc": s, "ood_beyond_acc": None if pe == "none" else s, "ood_acc": s}
            for pe in PES]


def live_losses():
    series = {f"k_back_{pe}_s{seed}": [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}]
              for pe in PES for seed in range(3)}
    groups = {cid: cid.split("_")[2] for cid in series}
    return series, groups, {cid: int(cid[-1]) for cid in series}


PAYLOADS = [{**eval_payload("nano_rope_s0", [10.0, 12.0], [1.0, None]), "config": {"pe": {"name": "rope"}}},
            {**eval_payload("nano_alibi_s0", [10.0, 10.5], [1.0, 1.0]), "config": {"pe": {"name": "alibi"}}}]
FIGURES = {  # built one by one: a test fails on its own figure
    "learning_curves": lambda: charts.learning_curves(cells(), "k_back"),
    "learning_curves_all": lambda: charts.learning_curves(cells(), "k_back", "ood_acc"),
    "bars": lambda: charts.id_ood_bars(summary_rows(), "k_back"),
    "per_position": lambda: charts.per_position(cells(), "k_back"),
    "loss": lambda: charts.loss_curves(*live_losses()[:1], "training loss", groups=live_losses()[1],
                                       dashes=live_losses()[2]),
    "ppl": lambda: charts.ppl_vs_length(PAYLOADS, "nonoverlap"),
    "heatmap": lambda: charts.retrieval_heatmap(PAYLOADS[0]["suites"]["niah"], "nano_rope_s0"),
    "attention": lambda: charts.attention_map([[1.0]], ["a"], ["a"], "attention"),
}


def figure(name):
    return FIGURES[name]()


def spec(fig) -> dict:
    return json.loads(pio.to_json(fig))


def test_one_colour_per_pe_on_every_chart():
    assert len(set(PE_COLOURS.values())) == len(PE_COLOURS) and not set(OTHER_COLOURS) & set(PE_COLOURS.values())
    from posbench.pe import PES as REGISTRY

    # every registered PE has a colour no other registered PE has: its fixed one, or its slot by rule
    registered = {name: pe_colour(name) for name in REGISTRY.names()}
    assert len(set(registered.values())) == len(registered)
    assert pe_colour("my_arm") == pe_colour("my_arm") in OTHER_COLOURS  # any other name: stable
    for name in ("learning_curves", "per_position", "loss"):
        for trace in spec(figure(name))["data"]:
            if name != "loss" and trace["name"] not in PES:  # a reference line's legend entry (chance, length)
                continue
            assert trace["line"]["color"] == pe_colour(trace["legendgroup"] if name == "loss" else trace["name"])
    for trace in spec(figure("bars"))["data"]:
        assert trace["marker"]["color"] == [pe_colour(pe) for pe in trace["x"]]
    # two checkpoints of two PEs: their PEs' colours (not two shades of one theme colour)
    ppl = {t["name"]: t["line"]["color"] for t in spec(figure("ppl"))["data"]}
    assert ppl == {"nano_rope_s0": pe_colour("rope"), "nano_alibi_s0": pe_colour("alibi")}


def test_live_loss_legend_has_one_entry_per_pe_and_seeds_by_dash():
    traces = spec(figure("loss"))["data"]
    assert len(traces) == 15
    assert [t["name"] for t in traces if t.get("showlegend", True)] == PES
    rope = [t for t in traces if t["legendgroup"] == "rope"]
    assert [t["line"]["dash"] for t in rope] == [seed_dash(0), seed_dash(1), seed_dash(2)]
    assert len({t["line"]["color"] for t in rope}) == 1


@pytest.mark.parametrize("name", ["learning_curves", "bars", "per_position", "loss", "ppl", "heatmap", "attention"])
def test_titles_are_clear_of_the_toolbar(name):
    layout = spec(figure(name))["layout"]
    assert layout["modebar"]["orientation"] == "v"  # upright at the right edge, not across the title
    assert layout["margin"]["r"] >= charts.TOOLBAR_W and layout["title"]["x"] == 0
    if name not in ("heatmap", "attention"):  # their legends: none (a colour bar)
        assert layout["legend"]["orientation"] == "h"  # rows below the plot: wraps, never scrolls


def test_heatmap_lengths_are_categories_and_na_cells_show():
    result = {"lengths": [256, 512, 1024, 2048], "depths": [0.1, 0.9],
              "cells": [{"length": L, "depth": d, "accuracy": None if L == 2048 else 0.5, "na": "too long"
                         if L == 2048 else None} for L in (256, 512, 1024, 2048) for d in (0.1, 0.9)]}
    fig = spec(charts.retrieval_heatmap(result, "passkey"))
    assert fig["layout"]["xaxis"]["type"] == "category" and fig["layout"]["yaxis"]["type"] == "category"
    values, na = fig["data"]
    assert values["x"] == ["256", "512", "1024", "2048"] and values["text"][0] == ["50", "50", "50", ""]
    assert na["name"] == "n/a" and na["z"] == [[None, None, None, 1]] * 2
    assert na["text"] == [["", "", "", "n/a"]] * 2 and na["texttemplate"] == "%{text}"  # written in n/a cells only
    assert na["customdata"][0][3] == "too long"  # the reason, on hover


def test_every_accuracy_is_named():
    def texts(fig):
        f = spec(fig)
        return ([f["layout"]["title"]["text"], f["layout"].get("yaxis", {}).get("title", {}).get("text", "")]
                + [t.get("name", "") for t in f["data"]] + [a["text"] for a in f["layout"].get("annotations", [])])

    for name in ("learning_curves", "learning_curves_all", "bars", "per_position"):
        for text in texts(figure(name)):
            if "OOD" in text:
                assert any(w in text for w in ("beyond", "all positions", "OOD examples")), (name, text)
    assert "OOD beyond train length" in texts(figure("learning_curves"))[0]
    names = [t["name"] for t in spec(figure("bars"))["data"]]
    assert names[1].startswith("OOD beyond train length") and names[2].startswith("OOD, all positions")
    none = spec(figure("bars"))["data"][1]  # `none` has no beyond-length accuracy here: n/a, not 0
    assert none["text"][PES.index("none")] == "n/a" and none["customdata"][PES.index("none")] == "n/a"


def test_accuracy_charts_draw_chance_and_list_pes_in_the_studys_order():
    """A dotted chance line on every accuracy chart (per target position, the unit they measure), and the PEs in
    the order the study lists them, as its PNGs do, not alphabetically."""
    order = ["rope", "none", "alibi"]
    ordered = [replace(c, chance=0.5) for pe in order for c in cells() if c.pe == pe]
    rows = [{**r, "chance": 0.5} for r in summary_rows()]
    for fig in (charts.learning_curves(ordered, "k_back"), charts.per_position(ordered, "k_back"),
                charts.id_ood_bars(rows, "k_back")):
        s = spec(fig)
        assert any(sh.get("y0") == 50 and sh["line"].get("dash") == "dot" for sh in s["layout"].get("shapes", []))
    for fig in (charts.learning_curves(ordered, "k_back"), charts.per_position(ordered, "k_back")):
        assert [t["name"] for t in spec(fig)["data"] if t["name"] in PES and t.get("showlegend") is not False] == order


def test_attention_colour_bar_lies_below_the_map_clear_of_the_toolbar():
    heat = spec(figure("attention"))["data"][0]
    assert heat["colorbar"]["orientation"] == "h" and heat["colorbar"]["y"] < 0
    labels = spec(charts.attention_map([[1.0, 0.0]], ["b"], ["a", "b"], "t", q_start=1))["data"][0]
    assert labels["y"] == ["1:b"] and labels["x"] == ["0:a", "1:b"]  # rows and columns: one origin


def test_a_snapshot_just_before_the_final_one_is_not_drawn_as_a_doubled_end_point():
    """301 steps, a snapshot every 50: the curve holds 300 and 301; the chart ends once, at the final model."""
    curve = [{"step": s, "ood_beyond_acc": 0.5} for s in (50, 100, 150, 200, 250, 300, 301)]
    fig = charts.learning_curves(typed([{"task": "k_back", "pe": "rope", "curve": curve}]), "k_back")
    assert spec(fig)["data"][0]["x"] == [50, 100, 150, 200, 250, 301]
    even = [{"step": s, "ood_beyond_acc": 0.5} for s in (50, 100, 150)]
    assert spec(charts.learning_curves(typed([{"task": "k_back", "pe": "rope", "curve": even}]), "k_back"))["data"][0][
        "x"] == [50, 100, 150]


def test_learning_curves_and_per_position_draw_the_pngs_interval_band():
    """Item 6: the app's accuracy curves carry the band the study PNGs draw (stats.interval over seeds,
    t-interval clipped to [0, 1]). By hand: k_back at step 10, beyond-length accuracy 0.4, 0.5, 0.6 over seeds 0-2:
    mean 50, sd 10, t_{0.975, 2} = 4.303, half-width 4.303 x 10 / sqrt(3) = 24.84 pts: [25.16, 74.84]."""
    rows = [{"task": "k_back", "pe": "rope", "seed": s, "seq_len": 2, "ood_by_position": [None, 0.4 + 0.1 * s],
             "curve": [{"step": 10, "ood_beyond_acc": 0.4 + 0.1 * s}]} for s in range(3)]
    rows = typed(rows)
    for fig, x in ((charts.learning_curves(rows, "k_back"), 10), (charts.per_position(rows, "k_back"), 1)):
        band = [t for t in spec(fig)["data"] if t.get("fill") == "toself"]
        assert len(band) == 1 and band[0]["showlegend"] is False and band[0]["legendgroup"] == "rope"
        ys = dict(zip(band[0]["x"], band[0]["y"]))  # upper edge out, lower edge back: one x each way here
        assert band[0]["x"] == [x, x] and band[0]["y"][0] == pytest.approx(74.84, abs=0.01)
        assert band[0]["y"][1] == pytest.approx(25.16, abs=0.01), ys
    one = charts.learning_curves(rows[:1], "k_back")  # one seed: no interval, the point without a band
    assert not [t for t in spec(one)["data"] if t.get("fill") == "toself"]


def test_a_loss_series_with_one_point_is_drawn():
    """Item 6: the live loss chart was empty while a cell had logged one step (a line of one point is
    invisible): that point is a marker."""
    fig = spec(charts.loss_curves({"k_back_rope_s0": [{"step": 1, "loss": 2.0}],
                                   "k_back_rope_s1": [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.0}]}))
    modes = {t["name"]: t["mode"] for t in fig["data"]}
    assert "markers" in modes["k_back_rope_s0"] and modes["k_back_rope_s1"] == "lines"


def test_chance_and_training_length_are_named_in_the_legend_not_over_the_data():
    """Item 6: the "chance" and "training length" labels were written inside the plot, over the curves;
    they are legend entries of their (dotted, dashed) lines now."""
    rows = [replace(c, chance=0.5) for c in cells()]
    for fig in (charts.learning_curves(rows, "k_back"), charts.per_position(rows, "k_back"),
                charts.id_ood_bars([{**r, "chance": 0.5} for r in summary_rows()], "k_back")):
        s = spec(fig)
        assert not [a["text"] for a in s["layout"].get("annotations", [])]
        legend = [t["name"] for t in s["data"] if t.get("showlegend") is not False]
        assert "chance (50%)" in legend
    legend = [t["name"] for t in spec(charts.per_position(rows, "k_back"))["data"]]
    assert "training length (right: beyond it)" in legend
