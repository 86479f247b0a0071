"""The one long-context report section (a study's and a sweep's) on hand-made cell results: scores by family and
length, effective length per row with its interval, the multi-key claims, the question-blind pick's n/a, each
against values worked out by hand. tests/sweeps/test_sweep_long_context.py gives a sweep's results the same
numbers and checks the sweep report prints the same section."""

from dataclasses import replace

import numpy as np
from scipy import stats as sps

from posbench.studies.cell_result import CellResult
from posbench.studies.long_context_report import (
    MEAN,
    SeedScores,
    effective_table,
    family_scores,
    grids_from_cells,
    length_tables,
    long_context_section,
)


def grid(scores: dict, train_len: int = 128, guess: float = 0.25) -> dict:
    """A cell's length grid from {(family, length, depth): exact}; baselines 0 and `guess` everywhere."""
    cells = [{"family": f, "length": L, "depth": d, "n": 8, "exact": v, "chance": 0.0, "guess": guess,
              "commonest": 0.0, "baseline": 0.0} for (f, L, d), v in scores.items()]
    return {"train_len": train_len, "lengths": sorted({L for _, L, _ in scores}), "cells": cells}


def result(pe: str, seed: int, scores: dict, axes: dict | None = None) -> CellResult:
    return CellResult(cell_id=f"ruler_mix_{pe}_s{seed}", pe=pe, seed=seed, task="ruler_mix", axes=axes or {},
                      length_grid=grid(scores))


def by_length(family: str, values: dict, depths=(0.5,)) -> dict:
    return {(family, L, d): v for L, v in values.items() for d in depths}


def one_grid(results: list[CellResult], keep: float = 0.8):
    (g,) = grids_from_cells(results, keep)
    return g


def test_family_scores_average_depths_then_families():
    scores = {("niah_multikey", 128, 0.0): 1.0, ("niah_multikey", 128, 1.0): 0.5, ("niah_multikey", 256, 0.0): 0.5,
              ("niah_multikey", 256, 1.0): 0.5, **by_length("common_words", {128: 0.5, 256: 0.0})}
    got = family_scores(grid(scores))
    assert got["niah_multikey"] == {128: 0.75, 256: 0.5}
    assert got[MEAN] == {128: 0.625, 256: 0.25}
    scores[("niah_multikey", 256, 1.0)] = None  # one depth n/a: the length is n/a for the family and the mean
    got = family_scores(grid(scores))
    assert got["niah_multikey"][256] is None and got[MEAN][256] is None and got[MEAN][128] == 0.625


def test_effective_length_is_the_last_length_before_a_dip():
    r = result("rope", 0, by_length("kv_retrieval", {128: 0.8, 256: 0.7, 512: 0.5, 1024: 0.9}))
    seed = SeedScores.from_cells(r.length_grid["cells"])
    eff = seed.effective(128, keep=0.8)
    assert eff["length"] == 256 and eff["id_score"] == 0.8  # 0.7 >= 0.64 passes, 0.5 ends it
    loose = seed.effective(128, keep=0.6)  # 0.5 >= 0.48 passes, and so does 1024's 0.9
    assert loose["length"] == 1024 and loose["limit"].startswith("passes at every tested length")
    flat = result("rope", 0, by_length("kv_retrieval", {128: 0.0, 256: 0.0}))
    assert SeedScores.from_cells(flat.length_grid["cells"]).effective(128, 0.8)["length"] is None  # nothing to keep


def test_effective_table_interval_over_seeds():
    """Seeds with effective lengths 256, 256, 512 (hand-made scores): mean 341 with the Student t-interval,
    clipped to the tested lengths [128, 1024]; a seed at chance is n/a and counted."""
    ends = {0: {128: 0.8, 256: 0.8, 512: 0.1, 1024: 0.1}, 1: {128: 0.8, 256: 0.8, 512: 0.1, 1024: 0.1},
            2: {128: 0.8, 256: 0.8, 512: 0.8, 1024: 0.1}}
    results = [result("rope", s, by_length("kv_retrieval", v)) for s, v in ends.items()]
    results += [result("none", s, by_length("kv_retrieval", {128: 0.8 * (s > 0), 256: 0.0, 512: 0.0, 1024: 0.0}))
                for s in range(3)]
    table = effective_table(one_grid(results), 0.95, 1000)
    x = np.array([256.0, 256.0, 512.0])
    half = sps.t.ppf(0.975, 2) * x.std(ddof=1) / np.sqrt(3)
    lo, hi = max(128.0, x.mean() - half), min(1024.0, x.mean() + half)
    assert f"| rope | {x.mean():.0f} [{lo:.0f}, {hi:.0f}] | 256, 256, 512 | 0 | 341 (3/3) |" in table
    assert "| none | 128 [no interval] | n/a, 128, 128 | 1 | 128 (2/3) |" in table


def multikey_results() -> list[CellResult]:
    """rope far above multi-key NIAH's 1/4 at 2x, none far below it, over 3 seeds; common_words beside it."""
    good = {0: 0.875, 1: 1.0, 2: 0.875}
    bad = {0: 0.0, 1: 0.0625, 2: 0.0}
    results = [result("rope", s, {**by_length("niah_multikey", {128: 1.0, 256: good[s]}),
                                   **by_length("common_words", {128: [0.25, 0.5, 0.75][s], 256: 0.0})})
               for s in range(3)]
    return results + [result("none", s, {**by_length("niah_multikey", {128: 1.0, 256: bad[s]}),
                                          **by_length("common_words", {128: 0.5, 256: 0.0})}) for s in range(3)]


def test_length_table_and_multikey_claims():
    """Per-length cells are mean [t-interval] over seeds; the claim `row > 1/4` at 2x is reproduced for a row far
    above it and refuted for one far below, judged as one family."""
    results = multikey_results()
    tables = length_tables(one_grid(results), 0.95, 1000)
    assert "| row | 1x (128) | 2x (256) |" in tables
    x = np.array([0.25, 0.5, 0.75])
    half = sps.t.ppf(0.975, 2) * x.std(ddof=1) / np.sqrt(3)
    assert f"| rope | {100 * x.mean():.1f} [{100 * max(0, x.mean() - half):.1f}, " \
           f"{100 * min(1, x.mean() + half):.1f}] | 0.0 [0.0, 0.0] |" in tables
    assert "| *question-blind pick* | 25.0 | 25.0 |" in tables
    text = "\n".join(long_context_section(grids_from_cells(results, 0.8), 0.95, 1000))
    assert "## Multi-key NIAH above its question-blind baseline at 2x" in text
    verdicts = [line for line in text.splitlines() if line.startswith("**Verdict")]
    assert verdicts == ["**Verdict (niah_multikey 2x): reproduced**",
                        "**Verdict (niah_multikey 2x): not reproduced: `none > 0.25` refuted (none - 0.25 = "
                        + verdicts[1].split("= ", 1)[1]]
    assert "Holm over the 2 relations" in text
    assert "| row | 1x (training length) | 2x |" in text  # each row's score in distribution beside its 2x score
    assert "| none | 100.0 [100.0, 100.0] | 2.1 [0.0, 11.0] |" in text  # 2.1 +- t(0.975, 2) x sd / sqrt(3)


def test_vary_axes_are_groups_judged_as_one_family():
    """A study with `vary` gives one grid per combination of axes, its headings and verdicts named by it, and the
    multi-key claims of every group in one Holm family (4 relations here, 2 per group); without axes the headings
    carry no name (the test above)."""
    results = [replace(r, axes={"model.lr": lr}) for lr in (0.001, 0.002) for r in multikey_results()]
    grids = grids_from_cells(results, 0.8)
    assert [g.label for g in grids] == ["lr=0.001", "lr=0.002"] and list(grids[0].rows) == ["rope", "none"]
    text = "\n".join(long_context_section(grids, 0.95, 1000))
    assert "## Effective length per row (lr=0.002)" in text and "**lr=0.001**" in text
    assert "Holm over the 4 relations" in text
    assert "**Verdict (lr=0.002 niah_multikey 2x): reproduced**" in text


def test_a_one_candidate_family_has_no_question_blind_pick_in_the_tables():
    """Item 8: a context with one candidate (single-needle NIAH) makes the question-blind pick certain; the
    table says n/a for it rather than a 100.0 baseline row beside 0.0 scores."""
    one = result("rope", 0, by_length("niah_single", {128: 0.0, 256: 0.0}))
    one = replace(one, length_grid=grid(by_length("niah_single", {128: 0.0, 256: 0.0}), guess=1.0))
    tables = length_tables(one_grid([one]), 0.95, 1000)
    assert "| *question-blind pick* | n/a (one candidate in the context) | n/a (one candidate in the context) |" \
        in tables and "100.0" not in tables


def test_the_mean_over_families_has_no_question_blind_pick_when_one_family_has_one_candidate():
    """Item 8: the mean over families of the picks (1.0 for single-needle NIAH, 0.25 for multi-key) read 62.5, a
    level no reader has to beat; it is n/a then."""
    cells = [{"family": f, "length": 128, "depth": 0.5, "n": 8, "exact": 0.0, "chance": 0.0, "guess": g,
              "commonest": 0.0, "baseline": 0.0} for f, g in (("niah_single", 1.0), ("niah_multikey", 0.25))]
    one = replace(result("rope", 0, {}), length_grid={"train_len": 128, "lengths": [128], "cells": cells})
    tables = length_tables(one_grid([one]), 0.95, 1000)
    assert "| *question-blind pick* | 25.0 |" in tables and "62.5" not in tables
    assert "| *question-blind pick* | n/a (a family has one candidate in the context) |" in tables
