"""A grid's cells behind one interface, and the order every runner takes them in.

A cell kind is a small class registered in CELL_KINDS, in the file that owns its cell files: `task` (a study's
task-training cell, studies/study_runner.py: `<out>/cells/<cell_id>.json`) and `pretrain` (a sweep's pretraining
run, sweeps/execute.py: `<out>/done/<run>.json`). Each wraps its room's own planned item (a study `Cell`, a sweep
`Run`) and answers the same four things: its id, whether it is done in an output directory, how to run it alone,
and its result. `pending` is what both commands do before training: the cells in seed-major order, the finished
ones skipped, the wall-time estimate of the rest said before the first one starts. How a kind's cells are grouped
into jobs (a study's seed groups, a sweep's branch chains) stays in its room.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from posbench.grid.estimate import estimate
from posbench.registry import Registry

CELL_KINDS = Registry("grid cell kind", attr="kind")


class GridCell:
    """One cell of a grid: `item` is the kind's planned cell (a study Cell, a sweep Run)."""

    kind: str  # the registered name
    unit = "cells"  # what the estimate calls this kind's cells (a sweep's: runs)

    def __init__(self, item: Any):
        self.item = item

    @property
    def cell_id(self) -> str:
        """The cell's name: its result file's and run directory's."""
        raise NotImplementedError

    @property
    def seed(self) -> int:
        return self.item.seed

    def is_done(self, out_dir: Path) -> bool:
        """Its result is in `out_dir` (a re-run skips it)."""
        raise NotImplementedError

    def run(self, out_dir: Path) -> None:
        """Train (and score) this cell alone, writing its result into `out_dir`."""
        raise NotImplementedError

    def read(self, out_dir: Path) -> Any:
        """Its result as the kind writes it."""
        raise NotImplementedError

    def on_cpu(self) -> bool:
        """It trains on this machine's CPU (the estimate's measured rate is a CPU's)."""
        raise NotImplementedError

    @classmethod
    def train_flop(cls, todo: list[GridCell]) -> float:
        """6 x params x training tokens of the cells `todo` (of this kind), summed: what the estimate prices. A class
        method, so a kind can share work among its cells (the seeds of a study row share one model's size)."""
        raise NotImplementedError


def seed_major(cells: list, seeds: list[int]) -> list:
    """The cells in seed rounds: every row at the first seed, then every row at the next, ...; within a round the
    grid's order. After the first round a complete (if undecided) table exists."""
    rank = {seed: i for i, seed in enumerate(seeds)}
    return sorted(cells, key=lambda c: rank[c.seed])


def pending(cells: list[GridCell], seeds: list[int], out_dir: Path, workers: int, log: Callable[[str], Any],
            scope: str = "") -> list[GridCell]:
    """The cells still to run, seed-major. Before anything runs, when something is left to run, the wall-time
    estimate of running them `workers` at a time (grid/estimate.py; none for cells on a GPU) is logged as
    `estimate: ...`; `scope` says what it covers when not the whole grid (a sequential study's `this look`)."""
    todo = [c for c in seed_major(cells, seeds) if not c.is_done(out_dir)]
    if todo and (est := estimate(cells, workers, todo)) is not None:
        log(f"estimate: {scope + ', ' if scope else ''}{est.text()}")
    return todo
