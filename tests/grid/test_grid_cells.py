"""The one grid (grid/cells.py): a study's task cells and a sweep's pretraining runs are two registered kinds behind
one interface, taken by `pending` in seed-major order with the finished ones skipped and the estimate said first
(grid/estimate.py, each kind pricing its own cells: tests/grid/test_grid_estimate.py).
Built on real plans and real result files, nothing trained (the end-to-end runs are tests/studies/test_study_rounds.py
and tests/sweeps/test_sweep_estimate.py, which also show each command going through `pending`)."""

import json
from pathlib import Path

from posbench.config_loader import load
from posbench.fileio import write_json, write_text
from posbench.grid.cells import CELL_KINDS, pending
from posbench.studies.cell_files import cell_path
from posbench.studies.cell_result import CellResult, dumps_cell
from posbench.studies.study_runner import TaskCell
from posbench.studies.study_spec import StudyConfig, expand
from posbench.sweeps.execute import PretrainCell, done_path
from posbench.sweeps.sweep_spec import SweepConfig, plan_runs


def test_the_two_cell_kinds_are_registered_under_one_interface():
    assert CELL_KINDS["task"] is TaskCell and CELL_KINDS["pretrain"] is PretrainCell
    assert (TaskCell.kind, PretrainCell.kind) == ("task", "pretrain")


def study_cells() -> tuple[StudyConfig, list[TaskCell]]:
    study = load(StudyConfig, overrides=[{"tasks": [{"name": "k_back", "k": 2}], "pes": [{"name": "rope"},
                                                                                      {"name": "alibi"}],
                                          "seeds": [3, 1]}])
    return study, [TaskCell(c) for c in expand(study)]


def test_task_cells_run_seed_major_skip_the_finished_and_read_back_the_typed_result(tmp_path):
    study, cells = study_cells()
    # the grid's own order is seed-minor (each row's seeds together); the runner's is seed-major
    assert [c.cell_id for c in cells] == ["k_back_rope_s3", "k_back_rope_s1", "k_back_alibi_s3", "k_back_alibi_s1"]
    done = cells[2]
    result = CellResult(cell_id=done.cell_id, task="k_back", pe="alibi", seed=3, axes={}, id_acc=0.75)
    write_text(cell_path(tmp_path, done.item), dumps_cell(result))
    write_text(cell_path(tmp_path, cells[1].item), "{not json")  # damaged: not done, moved aside, run again
    lines = []
    todo = pending(cells, study.seeds, tmp_path, 1, lines.append)
    assert [c.cell_id for c in todo] == ["k_back_rope_s3", "k_back_rope_s1", "k_back_alibi_s1"]
    assert len(lines) == 1 and lines[0].startswith("estimate: 4 cells (1 already finished here are skipped): ")
    assert done.is_done(tmp_path) and done.read(tmp_path) == result
    assert (tmp_path / "cells" / "k_back_rope_s1.json.damaged").is_file()


def test_pretraining_runs_keep_each_branch_after_its_main_run_and_say_no_estimate_when_all_are_done(tmp_path):
    sweep = load(SweepConfig, overrides=[{"pes": [{"name": "rope"}, {"name": "alibi"}], "seeds": [0, 1], "run": {
        "model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "seq_len": 64},
        "train": {"stream": "random", "budget_unit": "tokens", "target_budgets": [4096, 8192],
                  "global_batch_tokens": 512, "micro_batch": 8, "device": "cpu"}}}])
    cells = [PretrainCell(r) for r in plan_runs(sweep, Path(tmp_path))]
    write_json(done_path(tmp_path, cells[0].item), {"step": 16})
    lines = []
    todo = pending(cells, sweep.seeds, tmp_path, 1, lines.append)
    assert [c.cell_id for c in todo] == ["nano_rope_s0_b4.1K", "nano_alibi_s0", "nano_alibi_s0_b4.1K",
                                         "nano_rope_s1", "nano_rope_s1_b4.1K", "nano_alibi_s1",
                                         "nano_alibi_s1_b4.1K"]
    assert len(lines) == 1 and lines[0].startswith("estimate: 8 runs (1 already finished here are skipped): ")
    assert cells[0].read(tmp_path) == {"step": 16}
    for cell in todo:
        write_json(done_path(tmp_path, cell.item), {})
    assert pending(cells, sweep.seeds, tmp_path, 1, lines.append) == [] and len(lines) == 1  # nothing to estimate
    assert json.loads(done_path(tmp_path, cells[1].item).read_text()) == {}
