"""What a study's task cells train, priced for the grid's one estimator (grid/estimate.py, through
`study_runner.TaskCell.train_flop`): 6 x params x tokens, a cell's tokens being its steps x its batch's tokens."""

from __future__ import annotations

from pathlib import Path

from posbench.data.tasks.task import build_task
from posbench.studies.cell_config import cell_config
from posbench.studies.study_spec import Cell

_PARAMS: dict[str, int] = {}  # (model, PE) config -> parameter count, kept for the page server's life


def train_flop(cells: list[Cell]) -> float:
    """6 x params x training tokens of `cells`, summed; each (task, row, axes) model is sized once (its seeds share
    it), and each model shape is built once per process (the app's page reruns on every widget change)."""
    from posbench.model.flops import model_stats

    flop_per_token: dict[tuple, tuple[float, int]] = {}
    total = 0.0
    trained = set()
    for cell in cells:
        # a training twin (a row that differs from another only in an arm's evaluation-time options) at the same
        # seed is trained once with it (studies/training_twins.py): priced once
        run = (repr(cell.task), repr(cell.pe), repr(cell.arch), repr(cell.settings), cell.seed)
        if run in trained:
            continue
        trained.add(run)
        key = (cell.task.name, repr(cell.task), cell.label, repr(sorted(cell.axes.items())))
        if key not in flop_per_token:
            cfg = cell_config(cell, build_task(cell.task), Path("work"))
            shape = repr((cfg.model, cfg.pe))  # what the parameter count depends on
            if shape not in _PARAMS:
                _PARAMS[shape] = model_stats(cfg.model, cfg.pe, "cpu").params_total
            flop_per_token[key] = (6.0 * _PARAMS[shape], cfg.train.global_batch_tokens)
        per_token, tokens_per_step = flop_per_token[key]
        total += per_token * tokens_per_step * cell.study.train.steps
    return total
