"""Run a study's grid: cells in parallel worker processes, one progress bar, resumable.

Each finished cell is written atomically to `<out>/cells/<cell_id>.json`; a re-run skips those and
repeats only unfinished cells, from scratch (a cell is deterministic in its seed, so an interrupted
study completes with the same numbers as an uninterrupted one). Worker output goes to
`<out>/logs/<cell_id>.log` (appended to by a re-run).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tqdm import tqdm

from posbench.errors import user_paths
from posbench.fileio import write_text
from posbench.procpool import call_logged, run_jobs
from posbench.studies.study_plots import all_plots
from posbench.studies.study_report import write_outputs
from posbench.studies.study_spec import Cell, StudyConfig, expand


def cell_path(out_dir: Path, cell: Cell) -> Path:
    return out_dir / "cells" / f"{cell.cell_id}.json"


def cpu_path(out_dir: Path, cell: Cell) -> Path:
    """A cell's CPU seconds per phase (`cell.CpuPhases`), beside its log: read by scripts/bench_study.py."""
    return out_dir / "logs" / f"{cell.cell_id}.cpu.json"


_cpu_after_last_cell = 0.0  # this worker's process CPU time when its previous cell was done


def _run_and_save(cell: Cell, out_dir: str) -> str:
    from posbench.studies.cell import CpuPhases, run_cell  # imported in the worker: torch loads once per process

    global _cpu_after_last_cell
    out = Path(out_dir)
    phases = CpuPhases(since=_cpu_after_last_cell)  # a worker's first cell also books its imports as startup
    result = run_cell(cell, out / "work", phases)
    path = cell_path(out, cell)
    write_text(path, json.dumps(result, sort_keys=True))
    phases.lap("other")
    _cpu_after_last_cell = time.process_time()
    write_text(cpu_path(out, cell), json.dumps({"pid": os.getpid(), "seconds": phases.seconds}, sort_keys=True))
    return cell.cell_id


def run_study(study: StudyConfig, out_dir: Path, workers: int | None = None, progress: bool = True,
              limit: int | None = None) -> dict:
    """`limit`: only the grid's first `limit` cells, reported on their own (scripts/bench_study.py)."""
    out_dir = Path(out_dir)
    with user_paths():  # --out is the user's: a file in its way, no permission to write there
        for sub in ("cells", "logs", "work"):
            (out_dir / sub).mkdir(parents=True, exist_ok=True)
    cells = expand(study)[:limit]
    todo = [c for c in cells if not cell_path(out_dir, c).is_file()]
    workers = min(workers or study.workers, max(1, len(todo)))
    t0 = time.perf_counter()
    bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc=f"study {study.name}", unit="cell",
               disable=not progress)
    failures = []
    if workers == 1:
        for cell in todo:
            call_logged(_run_and_save, (cell, str(out_dir)), str(out_dir / "logs" / f"{cell.cell_id}.log"), 1)
            bar.update()
    else:
        failures = run_jobs(_run_and_save, {c.cell_id: (c, str(out_dir)) for c in todo}, workers,
                            out_dir / "logs", on_done=lambda _: bar.update())
    bar.close()
    if failures:
        raise RuntimeError(f"{len(failures)} cells failed (logs in {out_dir / 'logs'}); re-run to retry them:\n"
                           + "\n".join(failures))
    report_cpu = time.process_time()
    results = [json.loads(cell_path(out_dir, c).read_text()) for c in cells]
    plots = all_plots(results, out_dir, study.eval.confidence)
    table = write_outputs(out_dir, results, study, plots)
    return {"table": table, "seconds": time.perf_counter() - t0, "ran": len(todo), "cells": len(cells),
            "report_cpu_s": time.process_time() - report_cpu}
