"""What a grid's cells cost on this machine before they start: the one wall-time estimator behind `posbench study`,
`posbench sweep` (each prints it before its first cell, and alone with `--estimate`) and the app's run page.

Each cell kind prices its own cells (`GridCell.train_flop`: 6 x params x the tokens they train; a sweep's branch run
only its cooldown) and says whether they train on the CPU (`GridCell.on_cpu`); the rate is one for every kind: the
quickstart's measured CPU seconds per training FLOP and per cell, scaled by this machine's one-thread matmul speed
(`cpu_speed`). Cells that train on a GPU get no estimate: a CPU's rate says nothing about a GPU's time.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from posbench.cpu_speed import matmul_rate
from posbench.procpool import usable_cores

if TYPE_CHECKING:  # grid/cells.py's `pending` calls `estimate`: the cell type is for annotations only
    from posbench.grid.cells import GridCell

# The quickstart as this project measured it (docs/performance.md, "The quickstart study": `bench_study.py`, 2-core
# AMD EPYC, one thread per cell process): the train phase did 36.56 TFLOP (6 x params x tokens) in 645.2 CPU-seconds
# and everything else of a cell (rows, scoring, start-up, report) 84.9 CPU-seconds over its 60 cells, while one
# thread's fp32 matmul at the study model's shape ran at REFERENCE_MATMUL. Another machine scales both by its own
# rate at that shape (`machine_speed`): the work is the same mix of matmuls and elementwise passes.
REFERENCE_MATMUL = 116.9e9  # FLOP/s, 1024x128 @ 128x384, one thread
TRAIN_FLOP_PER_CPU_S = 36.56e12 / 645.2
OTHER_CPU_S_PER_CELL = 84.9 / 60


@functools.lru_cache(maxsize=1)
def machine_speed() -> float:
    """This machine's one-thread matmul rate at the study model's shape over the reference's (best of 10 timings of
    0.3 GFLOP: ~40 ms, measured once per process; fewer read up to 20% low in a cold process)."""
    return matmul_rate(1024, 128, 384, repeats=10, flop_per_timing=3e8) / REFERENCE_MATMUL


@dataclass
class CostEstimate:
    cells: int  # in the grid
    todo: int  # not finished yet in the run directory (a resumed grid skips the others)
    train_flop: float  # 6 x params x training tokens, summed over the cells to run
    processes: int  # cell processes running at once: the grid's workers, at most one per core
    minutes: float  # wall minutes at the measured rate, approximate
    flop_per_cpu_s: float  # the training rate assumed on this machine
    load: float | None = None  # the 1-minute load average when estimated (None: unknown on this platform)
    unit: str = "cells"  # what the grid is made of: a study's cells, a sweep's runs

    def text(self) -> str:
        done = f" ({self.cells - self.todo} already finished here are skipped)" if self.todo < self.cells else ""
        tera = self.train_flop >= 1e11
        flop = f"{self.train_flop / 1e12:.2f} TFLOP" if tera else f"{self.train_flop / 1e9:.2f} GFLOP"
        wall = f"about {self.minutes:.0f} min" if self.minutes >= 1 else f"about {60 * self.minutes:.0f} s"
        return (f"{self.cells} {self.unit}{done}: {flop} of training (6 x params x tokens), "
                f"{wall} on {self.processes} of this machine's {usable_cores()} cores "
                f"(approximate: the quickstart's measured rate scaled by this machine's matmul speed, "
                f"{self.flop_per_cpu_s / 1e9:.0f} GFLOP of training per CPU-second, docs/performance.md; it "
                "assumes an idle machine" + self._load_text() + ")")

    def _load_text(self) -> str:
        """The load now, so a reader can see the estimate's assumption does not hold (cores shared: longer)."""
        if self.load is None:
            return ""
        busy = self.load + self.processes > usable_cores()  # other work wants cores the grid's processes need
        return (f": the load average now is {self.load:.1f} on {usable_cores()} cores"
                + (", so expect it to take longer" if busy else ""))


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform
        return None


def estimate(cells: list[GridCell], workers: int, todo: list[GridCell] | None = None) -> CostEstimate | None:
    """What running `todo` (the cells still to run; None: all of them) of the grid `cells` costs on this machine,
    `workers` processes at a time; None where a cell trains on a GPU. A grid's cells are of one kind."""
    todo = cells if todo is None else todo
    if not all(cell.on_cpu() for cell in cells):
        return None
    (kind,) = {type(cell) for cell in cells}
    train_flop = kind.train_flop(todo) if todo else 0.0
    processes = max(1, min(workers, usable_cores(), len(todo) or 1))
    speed = machine_speed()
    cpu_s = (train_flop / TRAIN_FLOP_PER_CPU_S + OTHER_CPU_S_PER_CELL * len(todo)) / speed
    return CostEstimate(len(cells), len(todo), train_flop, processes, cpu_s / processes / 60,
                        TRAIN_FLOP_PER_CPU_S * speed, load_average(), kind.unit)


def estimate_line(cells: list[GridCell], workers: int, todo: list[GridCell], scope: str = "") -> str:
    """The estimate as a command that only looks says it (`--estimate`, the app's run page): its text, or why there
    is none; `scope` as `cells.pending` takes it."""
    unit = type(cells[0]).unit
    est = estimate(cells, workers, todo) if todo else None
    if est is not None:
        line = est.text()
    elif todo:
        line = f"none: these {unit} train on a GPU, and the measured rate is a CPU's"
    else:
        line = f"nothing to run: all {len(cells)} {unit} are finished here"
    return f"{scope}, {line}" if scope else line
