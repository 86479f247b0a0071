"""Run a study's grid: cells in parallel worker processes, one progress bar, resumable.

Each finished cell is written atomically to `<out>/cells/<cell_id>.json`; a re-run skips those and
repeats only unfinished cells, from scratch (a cell is deterministic in its seed, so an interrupted
study completes with the same numbers as an uninterrupted one). Worker output goes to
`<out>/logs/<cell_id>.log`.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from tqdm import tqdm

from posbench.studies.plots import all_plots
from posbench.studies.report import write_outputs
from posbench.studies.spec import Cell, StudyConfig, expand


def cell_path(out_dir: Path, cell: Cell) -> Path:
    return out_dir / "cells" / f"{cell.cell_id}.json"


def _run_and_save(cell: Cell, out_dir: str) -> str:
    from posbench.studies.cell import run_cell  # imported in the worker: torch loads once per process

    out = Path(out_dir)
    log = out / "logs" / f"{cell.cell_id}.log"
    with open(log, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        result = run_cell(cell, out / "work")
    path = cell_path(out, cell)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, sort_keys=True))
    os.replace(tmp, path)
    return cell.cell_id


def run_study(study: StudyConfig, out_dir: Path, workers: int | None = None, progress: bool = True) -> dict:
    out_dir = Path(out_dir)
    for sub in ("cells", "logs", "work"):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
    cells = expand(study)
    todo = [c for c in cells if not cell_path(out_dir, c).is_file()]
    workers = min(workers or study.workers, max(1, len(todo)))
    t0 = time.perf_counter()
    bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc=f"study {study.name}", unit="cell",
               disable=not progress)
    failures = []
    if workers == 1:
        for cell in todo:
            _run_and_save(cell, str(out_dir))
            bar.update()
    else:
        # spawn, not fork: the parent may hold torch/OpenMP thread pools that fork would copy broken
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            futures = {pool.submit(_run_and_save, c, str(out_dir)): c for c in todo}
            for fut in as_completed(futures):
                try:
                    fut.result()
                except Exception as e:  # report every failed cell, keep the finished ones
                    failures.append(f"{futures[fut].cell_id}: {e.__class__.__name__}: {e}")
                bar.update()
    bar.close()
    if failures:
        raise RuntimeError(f"{len(failures)} cells failed (logs in {out_dir / 'logs'}); re-run to retry them:\n"
                           + "\n".join(failures))
    results = [json.loads(cell_path(out_dir, c).read_text()) for c in cells]
    plots = all_plots(results, out_dir, study.eval.confidence)
    table = write_outputs(out_dir, results, study, plots)
    return {"table": table, "seconds": time.perf_counter() - t0, "ran": len(todo), "cells": len(cells)}
