"""The long-context study: its preset, the report section from hand-made cell results (scores by family and length,
effective length per row with its interval, the multi-key claims), and a tiny study run end to end (2 steps; numbers
meaningless) that writes the section, the heatmaps and each cell's grid."""

import json
import re
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as sps

from posbench.data.tasks import get_task_class
from posbench.errors import ConfigError
from posbench.studies.cell_result import CellResult
from posbench.studies.long_context_report import (
    MEAN,
    effective_table,
    family_scores,
    length_tables,
    long_context_section,
    seed_effective,
)
from posbench.studies.study_runner import cell_spec, run_study
from posbench.studies.study_spec import expand, load_study

ROWS = ["rope", "alibi", "none", "fire", "rnope_swa", "fox", "drope", "stick_breaking", "cable", "randomized",
        "path", "repo", "grape_m", "grape_m_ctx", "grape_a", "grape_ap", "selective_rope", "tape", "seqpe", "swan_gpt"]


def grid(scores: dict, train_len: int = 128, guess: float = 0.25) -> dict:
    """A cell's length grid from {(family, length, depth): exact}; baselines 0 and `guess` everywhere."""
    cells = [{"family": f, "length": L, "depth": d, "n": 8, "exact": v, "chance": 0.0, "guess": guess,
              "commonest": 0.0, "baseline": 0.0} for (f, L, d), v in scores.items()]
    return {"train_len": train_len, "lengths": sorted({L for _, L, _ in scores}), "cells": cells}


def result(pe: str, seed: int, scores: dict) -> CellResult:
    return CellResult(cell_id=f"ruler_mix_{pe}_s{seed}", pe=pe, seed=seed, task="ruler_mix", axes={},
                      length_grid=grid(scores))


def by_length(family: str, values: dict, depths=(0.5,)) -> dict:
    return {(family, L, d): v for L, v in values.items() for d in depths}


def test_preset_rows_lengths_and_grid():
    study = load_study("long_context")
    (task,) = study.tasks
    assert (task.name, task.id_range, task.ood_range) == ("ruler_mix", (64, 128), (129, 1024))
    assert [r.label for r in study.rows()] == ROWS and len(study.seeds) >= 3
    swa = study.pes[ROWS.index("rnope_swa")]
    assert (swa.window, swa.swa_layers) == (64, 1)  # half the training length, one windowed layer
    (swan,) = study.arms  # SWAN-GPT's recipe at 2 layers: rnope_swa's split, the NoPE layer's scaling floored at 1
    assert (swan.pe.window, swan.pe.swa_layers) == (64, 1)
    assert study.pes[ROWS.index("randomized")].positions == "float"
    g = study.eval.length_grid
    assert g.multiples == [1, 2, 4, 8] and g.lengths(128) == [128, 256, 512, 1024]
    names = [f.name for f in task.families]
    assert names == ["niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "variable_tracking",
                     "common_words", "frequent_words", "kv_retrieval"]
    assert task.families[1].n_keys == 4  # multi-key keeps RULER's four keys: guess 1/4
    assert len(expand(study)) == len(ROWS) * len(study.seeds)
    assert '"length_grid": {"depths": [0.0, 0.25, 0.5, 0.75, 1.0], "multiples": [1, 2, 4, 8], "per_cell": 8}' in \
        cell_spec(expand(study)[0])


def test_a_grid_needs_the_mixed_task():
    study = load_study("long_context")
    study.tasks = [get_task_class("reverse").Config()]
    with pytest.raises(ConfigError, match="length_grid scores the long-context families of a `ruler_mix` task"):
        study.check()
    study.eval.length_grid.multiples = []  # no grid: any task
    study.check()


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
    eff = seed_effective(r, keep=0.8)
    assert eff["length"] == 256 and eff["id_score"] == 0.8  # 0.7 >= 0.64 passes, 0.5 ends it
    loose = seed_effective(r, keep=0.6)  # 0.5 >= 0.48 passes, and so does 1024's 0.9
    assert loose["length"] == 1024 and loose["limit"].startswith("passes at every tested length")
    flat = result("rope", 0, by_length("kv_retrieval", {128: 0.0, 256: 0.0}))
    assert seed_effective(flat, keep=0.8)["length"] is None  # nothing above the baseline to keep


def test_effective_table_interval_over_seeds():
    """Seeds with effective lengths 256, 256, 512 (hand-made scores): mean 341 with the Student t-interval,
    clipped to the tested lengths [128, 1024]; a seed at chance is n/a and counted."""
    ends = {0: {128: 0.8, 256: 0.8, 512: 0.1, 1024: 0.1}, 1: {128: 0.8, 256: 0.8, 512: 0.1, 1024: 0.1},
            2: {128: 0.8, 256: 0.8, 512: 0.8, 1024: 0.1}}
    results = [result("rope", s, by_length("kv_retrieval", v)) for s, v in ends.items()]
    results += [result("none", s, by_length("kv_retrieval", {128: 0.8 * (s > 0), 256: 0.0, 512: 0.0, 1024: 0.0}))
                for s in range(3)]
    table = effective_table(results, 0.8, 0.95, 1000)
    x = np.array([256.0, 256.0, 512.0])
    half = sps.t.ppf(0.975, 2) * x.std(ddof=1) / np.sqrt(3)
    lo, hi = max(128.0, x.mean() - half), min(1024.0, x.mean() + half)
    assert f"| rope | {x.mean():.0f} [{lo:.0f}, {hi:.0f}] | 256, 256, 512 | 0 | 341 (3/3) |" in table
    assert "| none | 128 [no interval] | n/a, 128, 128 | 1 | 128 (2/3) |" in table


def test_length_table_and_multikey_claims():
    """Per-length cells are mean [t-interval] over seeds; the claim `row > 1/4` at 2x is reproduced for a row far
    above it and refuted for one far below, judged as one family."""
    good = {0: 0.875, 1: 1.0, 2: 0.875}
    bad = {0: 0.0, 1: 0.0625, 2: 0.0}
    results = [result("rope", s, {**by_length("niah_multikey", {128: 1.0, 256: good[s]}),
                                   **by_length("common_words", {128: [0.25, 0.5, 0.75][s], 256: 0.0})})
               for s in range(3)]
    results += [result("none", s, {**by_length("niah_multikey", {128: 1.0, 256: bad[s]}),
                                   **by_length("common_words", {128: 0.5, 256: 0.0})}) for s in range(3)]
    tables = length_tables(results, 0.95, 1000)
    assert "| row | 1x (128) | 2x (256) |" in tables
    x = np.array([0.25, 0.5, 0.75])
    half = sps.t.ppf(0.975, 2) * x.std(ddof=1) / np.sqrt(3)
    assert f"| rope | {100 * x.mean():.1f} [{100 * max(0, x.mean() - half):.1f}, " \
           f"{100 * min(1, x.mean() + half):.1f}] | 0.0 [0.0, 0.0] |" in tables
    assert "| *question-blind pick* | 25.0 | 25.0 |" in tables
    text = "\n".join(long_context_section(results, 0.8, 0.95, 1000))
    assert "## Multi-key NIAH above its question-blind baseline at 2x" in text
    verdicts = [line for line in text.splitlines() if line.startswith("**Verdict")]
    assert verdicts == ["**Verdict (niah_multikey 2x): reproduced**",
                        "**Verdict (niah_multikey 2x): not reproduced: `none > 0.25` refuted (none - 0.25 = "
                        + verdicts[1].split("= ", 1)[1]]
    assert "Holm over the 2 relations" in text
    assert "| row | 1x (training length) | 2x |" in text  # each row's score in distribution beside its 2x score
    assert "| none | 100.0 [100.0, 100.0] | 2.1 [0.0, 11.0] |" in text  # 2.1 +- t(0.975, 2) x sd / sqrt(3)


@pytest.mark.slow
def test_tiny_study_end_to_end(tmp_path):
    study = load_study("long_context")
    task = study.tasks[0]
    task.id_range, task.ood_range = (64, 96), (97, 192)
    fam = {f.name: f for f in task.families}
    fam["niah_multikey"].value_digits = 1
    task.families = [fam["niah_multikey"], fam["common_words"], fam["kv_retrieval"]]
    study.pes, study.arms = [p for p in study.pes if p.name == "rope"], []
    # the preset's claims compare rows this tiny grid leaves out (the 2026 PEs): keep those about rope alone
    study.claims = [c for c in study.claims if set(re.findall(r"[a-z][a-z0-9_]*", c.order)) <= {"rope"}]
    study.seeds, study.workers = [0, 1], 1
    study.overrides = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "model.d_ff=32"]
    study.train.steps, study.train.batch_size, study.train.curve_points = 2, 4, 1
    study.eval.n_examples, study.eval.n_boot = 4, 200
    study.eval.length_grid.multiples, study.eval.length_grid.depths = [1, 2], [0.0, 1.0]
    study.eval.length_grid.per_cell = 2
    run_study(study, tmp_path, progress=False)
    report = (tmp_path / "report.md").read_text()
    for head in ("## Long-context families: exact match by length", "## Effective length per row",
                 "## Multi-key NIAH above its question-blind baseline at 2x", "**mean of families**"):
        assert head in report
    assert "| row | 1x (96) | 2x (192) |" in report
    for name in ("long_context_by_family.png", "long_context_niah_multikey_heatmap.png",
                 "long_context_kv_retrieval_heatmap.png"):
        assert (tmp_path / name).stat().st_size > 0 and f"![{name}]({name})" in report
    assert not (tmp_path / "long_context_common_words_heatmap.png").exists()  # no depth axis
    cells = json.loads((tmp_path / "results.json").read_text())["cells"]
    assert len(cells) == 2
    for c in cells:
        g = c["length_grid"]
        assert g["train_len"] == 96 and g["lengths"] == [96, 192]
        keys = sorted((x["family"], x["length"], x["depth"]) for x in g["cells"])
        assert keys == sorted([(f, L, d) for f in ("niah_multikey", "kv_retrieval") for L in (96, 192)
                               for d in (0.0, 1.0)] + [("common_words", L, 0.5) for L in (96, 192)])
        assert all(x["n"] == 2 and x["exact"] in (0.0, 0.5, 1.0) for x in g["cells"])
        assert all(x["guess"] == 0.25 for x in g["cells"] if x["family"] == "niah_multikey")


def test_a_one_candidate_family_has_no_question_blind_pick_in_the_tables():
    """Item 8: a context with one candidate (single-needle NIAH) makes the question-blind pick certain; the
    table says n/a for it rather than a 100.0 baseline row beside 0.0 scores."""
    one = result("rope", 0, by_length("niah_single", {128: 0.0, 256: 0.0}))
    one = replace(one, length_grid=grid(by_length("niah_single", {128: 0.0, 256: 0.0}), guess=1.0))
    tables = length_tables([one], 0.95, 1000)
    assert "| *question-blind pick* | n/a (one candidate in the context) | n/a (one candidate in the context) |" \
        in tables and "100.0" not in tables


def test_the_mean_over_families_has_no_question_blind_pick_when_one_family_has_one_candidate():
    """Item 8: the mean over families of the picks (1.0 for single-needle NIAH, 0.25 for multi-key) read 62.5, a
    level no reader has to beat; it is n/a then."""
    cells = [{"family": f, "length": 128, "depth": 0.5, "n": 8, "exact": 0.0, "chance": 0.0, "guess": g,
              "commonest": 0.0, "baseline": 0.0} for f, g in (("niah_single", 1.0), ("niah_multikey", 0.25))]
    one = replace(result("rope", 0, {}), length_grid={"train_len": 128, "lengths": [128], "cells": cells})
    tables = length_tables([one], 0.95, 1000)
    assert "| *question-blind pick* | 25.0 |" in tables and "62.5" not in tables
    assert "| *question-blind pick* | n/a (a family has one candidate in the context) |" in tables
