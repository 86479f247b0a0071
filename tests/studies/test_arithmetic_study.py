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
    # greedy decoding writes the answer exactly when every teacher-forced answer token is right: the same share
    for c in cells:
        for split in ("id", "ood"):
            assert c[f"{split}_generated_exact"] == pytest.approx(c[f"{split}_exact"], abs=1 / 24 + 1e-9), c["pe"]
