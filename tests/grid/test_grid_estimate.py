"""The grid's one estimator (grid/estimate.py) for what only looks (`--estimate`, the app's run page): the estimate,
or why there is none. The priced numbers are checked by hand per kind: tests/app/test_run_page.py (task cells) and
tests/sweeps/test_sweep_estimate.py (pretraining runs, a branch's cooldown)."""

from posbench.config_loader import load
from posbench.grid.estimate import estimate, estimate_line
from posbench.studies.study_runner import TaskCell
from posbench.studies.study_spec import StudyConfig, expand


def cells(*overrides: str) -> list[TaskCell]:
    study = load(StudyConfig, overrides=[{"tasks": [{"name": "k_back", "k": 2}], "pes": [{"name": "rope"}],
                                          "seeds": [0, 1], "overrides": list(overrides)}])
    return [TaskCell(c) for c in expand(study)]


def test_cells_on_a_gpu_get_no_estimate_and_the_line_says_why():
    gpu = cells("train.device=cuda")
    assert estimate(gpu, 1) is None  # the quickstart's CPU rate says nothing about a GPU's time
    assert estimate_line(gpu, 1, gpu) == "none: these cells train on a GPU, and the measured rate is a CPU's"


def test_a_finished_grid_has_nothing_to_run_and_a_scope_leads_the_line():
    cpu = cells("train.device=cpu")
    assert estimate_line(cpu, 1, []) == "nothing to run: all 2 cells are finished here"
    assert estimate_line(cpu, 1, [], "this look") == "this look, nothing to run: all 2 cells are finished here"
    assert estimate_line(cpu, 1, cpu[1:]).startswith("2 cells (1 already finished here are skipped): ")
