"""The arithmetic length-generalization presets: their rows, ranges and sizes as the study asks, and the CPU
preset run end to end with a tiny model (its own task, every row, two seeds): the report's exact match per digit
count and the accuracy-vs-digits plot. Numbers meaningless."""

import json

import pytest

from posbench.studies.study_runner import run_study
from posbench.studies.study_spec import expand, load_study

ROWS = ["rope", "none", "fire", "randomized", "abacus", "coupled"]


@pytest.mark.parametrize("preset,train_digits,test_digits", [("arithmetic", 4, 16), ("arithmetic_full", 10, 40)])
def test_presets_train_short_and_test_several_times_longer(preset, train_digits, test_digits):
    study = load_study(preset)
    (task,) = study.tasks
    assert (task.name, task.reverse, task.id_range, task.ood_range) == ("addition", "all", (1, train_digits),
                                                                        (train_digits + 1, test_digits))
    assert [pe.name for pe in study.pes] == ROWS and len(study.seeds) >= 3
    # the place-id PEs shift places far enough in training that every test place has a trained row
    for pe in study.pes[4:]:
        assert train_digits + pe.max_offset - 1 >= test_digits + 1
    cells = expand(study)
    assert len(cells) == len(ROWS) * len(study.seeds)


@pytest.mark.slow
def test_arithmetic_preset_reduced(tmp_path):
    study = load_study("arithmetic")
    study.tasks[0].id_range, study.tasks[0].ood_range = (1, 2), (3, 5)
    study.seeds, study.workers = [0, 1], 1
    study.overrides = ["model.d_model=32", "model.n_heads=2", "model.n_layers=1", "model.d_ff=64"]
    study.train.steps, study.train.batch_size, study.train.curve_points = 6, 8, 1
    study.eval.n_examples, study.eval.n_boot = 24, 200
    run_study(study, tmp_path, progress=False)
    report = (tmp_path / "report.md").read_text()
    assert "## Exact match per digit count (95% t-interval over 2 seeds)" in report
    assert "| PE | 1 | 2 | 3* | 4* | 5* |" in report
    for pe in ROWS:
        assert f"| {pe} | " in report
    assert (tmp_path / "accuracy_vs_digits.png").stat().st_size > 0
    cells = json.loads((tmp_path / "results.json").read_text())["cells"]
    assert len(cells) == 12 and all(set(c["exact_by_digits"]) == {"1", "2", "3", "4", "5"} for c in cells)
    assert all(c["id_digits"] == 2 for c in cells)
    # every learning-curve snapshot keeps exact match per digit count; the report reads the longest by step
    assert all(set(point["exact_by_digits"]) == {"1", "2", "3", "4", "5"} for c in cells for point in c["curve"])
    assert "## Exact match at and past the trained digit counts, by training step" in report
    assert "| PE | digits | 6 |" in report  # one checkpoint: the last step
    assert "| coupled | 2 | " in report and "| coupled | 5 | " in report  # the longest trained, then 3, 4, 5
    # greedy decoding writes the answer exactly when every teacher-forced answer token is right: the same share
    for c in cells:
        for split in ("id", "ood"):
            assert c[f"{split}_generated_exact"] == pytest.approx(c[f"{split}_exact"], abs=1 / 24 + 1e-9), c["pe"]


def row_setup(cell):
    """What a row changes: its task options, PE config and overrides, as plain values."""
    from posbench.config_loader import to_dict
    return to_dict(cell.task), to_dict(cell.pe), tuple(cell.overrides)


def test_coupling_preset_is_the_authors_recipe_and_each_ablation_removes_one_element():
    study = load_study("arithmetic_coupling")
    cells = {c.label: c for c in expand(study) if c.seed == study.seeds[0]}
    recipe = cells["coupled"]
    # HanseulJo/position-coupling: padded operands, the result reversed and padded (the carry place), coupled ids
    # with a random start on a learned table, one layer
    assert (recipe.task.reverse, recipe.task.pad) == ("answer", True)
    assert (recipe.pe.name, recipe.pe.inner.name, recipe.pe.offset) == ("coupled", "learned", "fit")
    assert "model.n_layers=1" in recipe.overrides and "model.qk_norm=false" in recipe.overrides
    # every test id (up to the 31st place, the carry of 30 digits) has a table row
    assert recipe.pe.max_positions > study.tasks[0].ood_range[1] + 1
    task, pe, over = row_setup(recipe)
    changed = {}
    for label in ("no_pad", "rev_all", "no_offset", "rope_inner"):
        t, p, o = row_setup(cells[label])
        assert o == over, label  # the same model and training
        changed[label] = {k for k in task if t[k] != task[k]} | {f"pe.{k}" for k in pe if p[k] != pe[k]}
    assert changed == {"no_pad": {"pad"}, "rev_all": {"reverse"}, "no_offset": {"pe.offset"},
                       "rope_inner": {"pe.inner", "pe.offset"}}  # RoPE has no table: nothing to start at random
    assert cells["none"].pe.name == "none" and row_setup(cells["none"])[0] == task
    assert {c.order for c in study.claims} == {"coupled > none", "coupled > no_offset", "coupled > no_pad"}
    assert all(c.metric == "ood_exact" for c in study.claims)


def test_abacus_preset_is_the_authors_offset_rule_and_its_variants():
    study = load_study("arithmetic_abacus")
    cells = {c.label: c for c in expand(study) if c.seed == study.seeds[0]}
    # mcleish7/arithmetic: one k in 0..100 per batch, every number reversed, NoPE attention
    assert (cells["abacus"].pe.shift, cells["abacus"].pe.max_offset) == ("batch", 101)
    assert cells["abacus"].task.reverse == "all"
    assert (cells["abacus_row"].pe.shift, cells["abacus_row"].pe.max_offset) == ("row", 101)
    # the smallest per-row range that trains every place the tests reach: 10 trained digits + 1 carry + 20 = 31
    k21 = cells["abacus_k21"].pe
    assert k21.shift == "row" and study.tasks[0].id_range[1] + 1 + k21.max_offset - 1 == study.tasks[0].ood_range[1] + 1
    assert len({row_setup(c)[2] for c in cells.values()}) == 1  # one model and training for every row
