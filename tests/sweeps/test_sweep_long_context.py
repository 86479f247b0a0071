"""A sweep's long-context section is a study's: the same per-seed numbers, given once as a study's cell results and
once as the `long_context` suite results of a planned sweep's runs, print the same section in report.md (the same
intervals, effective lengths and verdicts); run groups are named and judged as one family; the per-family heatmaps.
The section's values by hand: tests/studies/test_long_context_report.py."""

from types import SimpleNamespace

import numpy as np

from posbench.evaluation.effective_length import effective_length
from posbench.evaluation.suites.long_context import per_length
from posbench.studies.long_context_report import grids_from_cells, grids_from_suites, long_context_section
from posbench.sweeps.sweep_plots import all_plots
from posbench.sweeps.sweep_report import write_report
from tests.studies.test_long_context_report import grid, multikey_results
from tests.sweeps.test_sweep_protocol import planned

TRAIN_LEN = 128


def suite(length_grid: dict, seed: int) -> dict:
    """A study cell's length grid as the long_context suite writes it for one run (evaluation/suites/long_context.py:
    per family its cells, by_length and the baselines by length as the mean over depths, its effective length, the
    mean over families)."""
    fams = {}
    for c in length_grid["cells"]:
        cell = {"length": c["length"], "depth": c["depth"], "accuracy": c["exact"], "n": c["n"], "na": None,
                **{k: c[k] for k in ("chance", "commonest", "baseline", "guess")}}
        fams.setdefault(c["family"], {"lengths": length_grid["lengths"], "depths": [], "cells": [],
                                      "depth_axis": True})["cells"].append(cell)
    for fam in fams.values():
        fam["depths"] = sorted({c["depth"] for c in fam["cells"]})
        fam["by_length"] = per_length(fam["cells"], "accuracy")
        for key in ("baseline", "guess", "chance", "commonest"):
            fam[f"{key}_by_length"] = per_length(fam["cells"], key)
        fam["effective"] = effective_length({int(L): v for L, v in fam["by_length"].items()},
                                            {int(L): v for L, v in fam["baseline_by_length"].items()}, TRAIN_LEN, 0.8)
    lengths = length_grid["lengths"]
    mean = {key: {str(L): float(np.mean([f[key][str(L)] for f in fams.values()])) for L in lengths}
            for key in ("by_length", "baseline_by_length")}
    mean["effective"] = effective_length({L: mean["by_length"][str(L)] for L in lengths},
                                         {L: mean["baseline_by_length"][str(L)] for L in lengths}, TRAIN_LEN, 0.8)
    return {"train_len": TRAIN_LEN, "seed": seed, "shots": 0, "keep": 0.8, "n_samples": 8, "lengths": lengths,
            "asked_as": "mix", "filler": "task", "families": fams, "mean": mean}


def test_a_sweep_prints_the_studys_section_for_the_same_numbers(tmp_path):
    cells = multikey_results()  # rope and none x seeds 0-2: rope far above multi-key NIAH's 1/4 at 2x, none below
    sweep, runs = planned(tmp_path, ["rope", "none"], [0, 1, 2], TRAIN_LEN,
                          {"suites": ["long_context"], "lengths": [128, 256]})
    by_cell = {(c.pe, c.seed): c.length_grid for c in cells}
    results = {r.name: {"suites": {"long_context": suite(by_cell[(r.pe, r.seed)], r.seed)}} for r in runs}
    report = write_report(sweep, runs, results, tmp_path / "out", [])
    swept = report[report.index("## Long-context families"):]
    studied = "\n".join(long_context_section(grids_from_cells(cells, 0.8), sweep.confidence, sweep.n_boot))
    assert "Asked zero-shot." in swept  # how the checkpoints were prompted: a sweep's alone
    assert swept.replace(" Asked zero-shot.", "") == studied
    assert "**Verdict (niah_multikey 2x): reproduced**" in swept and "`none > 0.25` refuted" in swept
    csv = (tmp_path / "out" / "results.csv").read_text()  # each run's own effective length stays in results.csv
    assert f"long_context,{runs[0].group},rope,mean of families effective length,3," in csv


def runs_of(groups: dict[str, list[tuple[str, int]]]) -> list[tuple]:
    by_cell = {(c.pe, c.seed): c.length_grid for c in multikey_results()}
    return [(group, pe, seed, {"suites": {"long_context": suite(by_cell[(pe, seed)], seed)}})
            for group, cells in groups.items() for pe, seed in cells]


def test_run_groups_are_named_and_judged_as_one_family():
    """Two run groups: each block and verdict names its group, the claims of both are one Holm family (2 rows x 2
    groups), and a group of one seed per row decides nothing (no interval from one run)."""
    both = [(pe, s) for pe in ("rope", "none") for s in range(3)]
    grids = grids_from_suites(runs_of({"nano 16384": both, "tiny 16384": both}))
    assert [g.label for g in grids] == ["nano 16384", "tiny 16384"]
    text = "\n".join(long_context_section(grids, 0.95, 1000))
    assert "## Long-context families: exact match by length (tiny 16384)" in text and "**nano 16384**" in text
    assert "Holm over the 4 relations" in text
    assert "**Verdict (tiny 16384 niah_multikey 2x): reproduced**" in text
    (alone,) = grids_from_suites(runs_of({"nano 16384": [("rope", 0), ("none", 0)]}))
    assert alone.label == ""  # one group: named nowhere, as a study's
    verdicts = [x for x in "\n".join(long_context_section([alone], 0.95, 1000)).splitlines() if "Verdict" in x]
    assert verdicts == ["**Verdict (niah_multikey 2x): inconclusive: one seed (or a missing value) gives no "
                        "interval**"] * 2
    assert grids_from_suites([("nano", "rope", 0, {"suites": {"ppl": {}}})]) == []  # no suite, no section


def test_heatmaps_per_family(tmp_path):
    (tmp_path / "r").mkdir()
    cfg = SimpleNamespace(model=SimpleNamespace(seq_len=TRAIN_LEN), train=SimpleNamespace(out_dir=str(tmp_path / "r")))
    runs = [SimpleNamespace(name=f"{pe}{s}", pe=pe, seed=s, group="nano", parent=None, cfg=cfg)
            for pe in ("rope", "none") for s in range(2)]
    g = grid({("niah_multikey", L, d): 0.5 for L in (128, 256) for d in (0.0, 1.0)})
    results = {r.name: {"suites": {"long_context": suite(g, r.seed)}} for r in runs}
    paths = all_plots(runs, results, tmp_path)
    assert tmp_path / "plots" / "long_context_niah_multikey_heatmaps.png" in paths
