"""What a study (or a sweep's runs) costs on this machine before it starts: the one estimator behind the app's run
page, `posbench study` and `posbench sweep`, which print it before their first cell. Training FLOPs (6 x params x
tokens) at the quickstart's measured rate, scaled by this machine's one-thread matmul speed (`cpu_speed`)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from posbench.cpu_speed import matmul_rate
from posbench.data.tasks.task import build_task
from posbench.procpool import usable_cores
from posbench.studies.cell_config import cell_config
from posbench.studies.study_spec import Cell, StudyConfig, expand

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
    todo: int  # not finished yet in the run directory (a resumed study skips the others)
    train_flop: float  # 6 x params x training tokens, summed over the cells to run
    processes: int  # cell processes running at once: the study's workers, at most one per core
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
        busy = self.load + self.processes > usable_cores()  # other work wants cores the study's processes need
        return (f": the load average now is {self.load:.1f} on {usable_cores()} cores"
                + (", so expect it to take longer" if busy else ""))


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform
        return None


def cost(total: int, todo: int, train_flop: float, workers: int, unit: str = "cells") -> CostEstimate:
    """The estimate for `todo` of `total` jobs that train `train_flop` FLOPs together on `workers` processes: the
    quickstart's measured CPU seconds per training FLOP and per job, scaled by this machine's matmul speed."""
    processes = max(1, min(workers, usable_cores(), todo or 1))
    speed = machine_speed()
    cpu_s = (train_flop / TRAIN_FLOP_PER_CPU_S + OTHER_CPU_S_PER_CELL * todo) / speed
    return CostEstimate(total, todo, train_flop, processes, cpu_s / processes / 60, TRAIN_FLOP_PER_CPU_S * speed,
                        load_average(), unit)


_PARAMS: dict[str, int] = {}  # (model, PE) config -> parameter count, kept for the page server's life


def estimate(study: StudyConfig, todo: list[Cell] | None = None, cells: list[Cell] | None = None) -> CostEstimate:
    """What starting `study` costs on this machine, before it starts: cells to run and wall minutes. `todo`: the
    cells still to run (a resumed study skips its finished ones); None: all of them. `cells`: the cells `todo` is
    part of (a sequential study's look); None: the whole grid."""
    from posbench.model.flops import model_stats

    cells = expand(study) if cells is None else cells
    todo = cells if todo is None else todo
    flop_per_token: dict[tuple, tuple[float, int]] = {}  # the seeds of a (task, row, axes) share a model
    total = 0.0
    for cell in todo:
        key = (cell.task.name, repr(cell.task), cell.label, repr(sorted(cell.axes.items())))
        if key not in flop_per_token:
            cfg = cell_config(cell, build_task(cell.task), Path("work"))
            shape = repr((cfg.model, cfg.pe))  # what the parameter count depends on
            if shape not in _PARAMS:  # a page rerun (every widget change) must not build the models again
                _PARAMS[shape] = model_stats(cfg.model, cfg.pe, "cpu").params_total
            flop_per_token[key] = (6.0 * _PARAMS[shape], cfg.train.global_batch_tokens)
        per_token, tokens_per_step = flop_per_token[key]
        total += per_token * tokens_per_step * cell.study.train.steps
    return cost(len(cells), len(todo), total, study.workers)
