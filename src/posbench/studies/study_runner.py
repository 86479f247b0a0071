"""Run a study's grid: cells in parallel worker processes, one progress bar, resumable.

A job is one cell or, with `batch_seeds`, a seed group (studies/seed_groups.py): the cells that differ only
in seed, trained as one batched model, each member as it trains alone up to float rounding
(studies/batched_train.py); cells that cannot batch are jobs of their own, with the reason printed. Each
finished cell is written atomically to `<out>/cells/<cell_id>.json`; a re-run skips those and repeats only
unfinished cells, from scratch (a cell is deterministic in its seed, so an interrupted study completes with
the same numbers as an uninterrupted one). A finished cell is reused only if it was made with this cell's settings
(`cell_spec`, kept in `<out>/specs/<cell_id>.json` and written before the cell; studies/cell_files.py): a re-run
into the same `--out` with other steps, examples or overrides (a full run after `--smoke` into its directory) is
refused, naming the cells, instead of reporting the old cells as the new study's; adding PEs, tasks or seeds reuses
the cells that exist. Worker output goes to `<out>/logs/<job>.log`: `k_back_rope_s0.log`,
or `k_back_rope_s0-1-2.log` for a seed group (appended to by a re-run).
"""

from __future__ import annotations

import json
import os
import resource
import time
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from posbench.errors import ConfigError, user_paths
from posbench.fileio import write_text
from posbench.grid.cells import CELL_KINDS, GridCell, pending, seed_major
from posbench.grid.estimate import estimate_line
from posbench.procpool import call_logged, run_jobs
from posbench.studies.cell_files import (
    cell_path,
    cell_spec,
    check_finished_cells,
    cpu_path,
    finished,
    report_only_refusal,
    spec_path,
)
from posbench.studies.cell_result import dumps_cell, loads_cell
from posbench.studies.published import write_result
from posbench.studies.seed_groups import SeedGroup, seed_groups
from posbench.studies.study_matmul import study_matmul
from posbench.studies.study_plots import all_plots
from posbench.studies.study_report import write_outputs
from posbench.studies.study_spec import Cell, StudyConfig, expand

_cpu_after_last_cell = 0.0  # this worker's process CPU time when its previous job was done


def _run_and_save(cells: list[Cell], out_dir: str, matmul: str | None = None) -> str:
    """One job: a seed group (studies/seed_groups.py), trained batched or, where it cannot be, cell by cell;
    each cell's result written as it would be alone. `matmul`: the study's recorded library for model.matmul=auto
    (studies/study_matmul.py)."""
    from posbench.studies.cell import CpuPhases, run_group  # imported in the worker: torch loads once per process

    global _cpu_after_last_cell
    out = Path(out_dir)
    phases = CpuPhases(since=_cpu_after_last_cell)  # a worker's first job also books its imports as startup
    results = run_group(cells, out / "work", phases, matmul)
    for cell, result in zip(cells, results):
        write_text(spec_path(out, cell), cell_spec(cell))  # first: a cell file is never without its spec
        # the cell carries its spec too (specs/ can be lost); a NaN is never written (allow_nan: a ValueError)
        write_text(cell_path(out, cell), dumps_cell(replace(result, spec=json.loads(cell_spec(cell)))))
    phases.lap("other")
    _cpu_after_last_cell = time.process_time()
    # a group's seconds are shared evenly by its cells (they trained as one model)
    share = {phase: s / len(cells) for phase, s in phases.seconds.items()}
    for cell in cells:
        write_text(cpu_path(out, cell), json.dumps({"pid": os.getpid(), "seconds": share}, sort_keys=True))
    return cells[0].cell_id


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM's stop) during a study, after the report of the cells finished by then was written."""

    def __init__(self, finished: int, cells: int, report: Path):
        super().__init__(f"interrupted: {finished} of {cells} cells finished; report of those: {report}")
        self.finished, self.cells, self.report = finished, cells, report


@CELL_KINDS.register("task")
class TaskCell(GridCell):
    """A study's task-training cell (grid/cells.py): its result is `<out>/cells/<cell_id>.json`."""

    item: Cell

    @property
    def cell_id(self) -> str:
        return self.item.cell_id

    def is_done(self, out_dir: Path) -> bool:
        return finished(out_dir, self.item)  # a damaged or foreign file is moved aside: not done

    def run(self, out_dir: Path) -> None:
        _run_and_save([self.item], str(out_dir))

    def read(self, out_dir: Path):
        path = cell_path(out_dir, self.item)
        return loads_cell(path.read_text(), str(path), self.cell_id)

    def on_cpu(self) -> bool:
        # a study's device is one override (`posbench study --device` adds it), the same for all of its cells
        return not any(o.startswith("train.device=") and o != "train.device=cpu" for o in self.item.study.overrides)

    @classmethod
    def train_flop(cls, todo: list[TaskCell]) -> float:
        from posbench.studies.cost import train_flop

        return train_flop([c.item for c in todo])


class Rounds:
    """Which seed rounds are complete, and the report of them rewritten as each one completes."""

    def __init__(self, study: StudyConfig, cells: list[Cell], out_dir: Path, log):
        self.study, self.cells, self.out_dir, self.log = study, cells, out_dir, log
        self.seeds = list(dict.fromkeys(c.seed for c in seed_major(cells, study.seeds)))
        self.reported = self.complete()

    def complete(self) -> int:
        """How many leading seed rounds have every cell finished on disk."""
        done = 0
        for seed in self.seeds:
            if not all(cell_path(self.out_dir, c).is_file() for c in self.cells if c.seed == seed):
                break
            done += 1
        return done

    def after_job(self) -> None:
        """Rewrite the report when a round has just completed (the last one is the caller's final report)."""
        rounds = self.complete()
        if self.reported < rounds < len(self.seeds):
            self.reported = rounds
            path = write_report(self.study, self.cells, self.out_dir, self.seeds[:rounds])
            self.log(f"seed round {rounds} of {len(self.seeds)} done: {path} rewritten with seeds "
                       f"{', '.join(map(str, self.seeds[:rounds]))}")


def write_report(study: StudyConfig, cells: list[Cell], out_dir: Path, seeds: list[int] | None = None,
                 finished_only: bool = False) -> Path:
    """report.md, results and plots from the finished cells of `seeds` (all of the study's: None), in the grid's
    order; `finished_only`: whatever is finished (an interrupted study). Returns the report's path."""
    keep = set(study.seeds if seeds is None else seeds)
    chosen = [c for c in cells if c.seed in keep and (not finished_only or cell_path(out_dir, c).is_file())]
    results = [loads_cell(cell_path(out_dir, c).read_text(), str(cell_path(out_dir, c)), c.cell_id) for c in chosen]
    shown = replace(study, seeds=[s for s in study.seeds if s in {c.seed for c in chosen}])
    plots = all_plots(results, out_dir, study.eval.confidence)
    write_outputs(out_dir, results, shown, plots)
    return out_dir / "report.md"


def run_round(groups: list[SeedGroup], out_dir: Path, workers: int, matmul: str | None, done) -> list[str]:
    """Train and write the cells of `groups` (jobs, in order), `workers` processes at a time; `done(name)` after
    each job. Returns the failed jobs' lines (their logs under `<out>/logs/`); Ctrl-C propagates."""
    if workers == 1:
        for g in groups:
            call_logged(_run_and_save, (g.cells, str(out_dir), matmul), str(out_dir / "logs" / f"{g.name}.log"), 1)
            done(g.name)
        return []
    return run_jobs(_run_and_save, {g.name: (g.cells, str(out_dir), matmul) for g in groups}, workers,
                    out_dir / "logs", on_done=done)


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the cell workers, once the pool has joined them)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _workers(study: StudyConfig, workers: int | None, todo: list) -> int:
    """No more worker processes than jobs."""
    return min(workers or study.workers, max(1, len(todo)))


def _pending(study: StudyConfig, cells: list[Cell], out_dir: Path, workers: int | None, log,
             look: bool = False) -> list[Cell]:
    """The cells still to train, through the grid's one `pending` (grid/cells.py: seed-major, finished cells
    skipped, the estimate logged before the first); `look`: `cells` are a sequential look's (later looks, if any,
    are not known yet)."""
    todo = pending([TaskCell(c) for c in cells], study.seeds, out_dir, workers or study.workers, log,
                   "this look" if look else "")
    return [c.item for c in todo]


def estimate_text(study: StudyConfig, out_dir: Path, workers: int | None = None) -> str:
    """The wall-time estimate of what `run_study` would train into `out_dir` (a sequential study: its first look),
    read only: a finished cell's file there is skipped, nothing is moved, made or trained. The app's run page shows
    it and `posbench study --estimate` prints it; the runner logs the same estimator's line before its first cell."""
    cells = expand(study)
    if study.sequential is not None:
        from posbench.studies import sequential

        cells = sequential.wanted(cells, sequential.replay(study, [], sequential.rows_of(cells)))
    check_finished_cells(out_dir, cells)  # what a run would refuse, refused here too
    grid = [TaskCell(c) for c in cells]
    todo = [c for c in grid if not cell_path(out_dir, c.item).is_file()]
    return estimate_line(grid, workers or study.workers, todo, "" if study.sequential is None else "this look")


def _train(study: StudyConfig, cells: list[Cell], todo: list[Cell], out_dir: Path, workers: int | None,
           progress: bool, batch_seeds: bool, log, rounds: Rounds | None) -> None:
    """Train `todo` (of the study's `cells`) in worker processes, `rounds` rewriting the report as seed rounds
    complete; an interrupt writes the report of what finished and raises `Interrupted`."""
    workers = _workers(study, workers, todo)
    matmul, matmul_note = study_matmul(todo, out_dir) if todo else (None, "")  # measured once, recorded in <out>
    if matmul_note:
        log(matmul_note)
    groups = seed_groups(todo, workers, batch_seeds)
    separate = {}
    for g in groups:
        if g.reason is not None:
            separate.setdefault(g.reason, []).append(g.cells[0].cell_id)
    bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc=f"study {study.name}", unit="cell",
               disable=not progress)
    for reason, ids in separate.items():
        if batch_seeds:  # the model-level reasons (a probe that fails) are in the group's log
            tqdm.write(f"trained separately ({reason}): {', '.join(ids)}")
    failures = []
    sizes = {g.name: len(g.cells) for g in groups}

    def done(name: str) -> None:
        bar.update(sizes[name])
        if rounds is not None:
            rounds.after_job()

    try:
        # today the whole grid, seed-major, is one call: workers never idle at a round's end, and `Rounds` reports
        # each round as it completes; a per-round decision (sequential seeds) calls it once per round instead
        failures = run_round(groups, out_dir, workers, matmul, done)
    except KeyboardInterrupt:
        bar.close()
        n = sum(cell_path(out_dir, c).is_file() for c in cells)
        report = write_report(study, cells, out_dir, finished_only=True) if n else out_dir / "report.md"
        raise Interrupted(n, len(cells), report) from None
    bar.close()
    if failures:
        raise RuntimeError(f"{len(failures)} jobs failed (logs in {out_dir / 'logs'}); re-run to retry them:\n"
                           + "\n".join(failures))


def _sequential(study: StudyConfig, cells: list[Cell], out_dir: Path, workers: int | None, progress: bool,
                batch_seeds: bool, log, report_only: bool = False) -> tuple[list[Cell], list[Cell]]:
    """Round after round: train the cells the last look wants, look again (`sequential.replay` over the finished
    cells), until every row has stopped; the report is rewritten after each look. Returns the cells the looks
    judged and those trained now. `report_only`: every cell the looks want must be finished already."""
    from posbench.studies import sequential

    rows, ran, done = sequential.rows_of(cells), [], {}
    rep = sequential.replay(study, [], rows)
    while not rep.finished:
        want, looks = sequential.wanted(cells, rep), rep.looks_done
        if report_only and (refusal := report_only_refusal(out_dir, want)):
            raise ConfigError(f"{refusal} (look {rep.looks_done + 1} of the sequential seeds wants them)")
        todo = _pending(study, want, out_dir, workers, log, look=True)
        _train(study, want, todo, out_dir, workers, progress, batch_seeds, log, None)
        ran += todo
        for c in want:  # every look's cells: a row that stopped at an earlier look is judged on them again
            if c.cell_id not in done:
                done[c.cell_id] = loads_cell(cell_path(out_dir, c).read_text(), str(cell_path(out_dir, c)), c.cell_id)
        rep = sequential.replay(study, list(done.values()), rows)
        if rep.looks_done == looks:  # a grid cut short (`limit`) lacks the look's cells: report what there is
            break
        if todo and not rep.finished:  # a resumed study's looks over finished cells write no report between
            write_report(study, sequential.used(cells, rep), out_dir, finished_only=True)
            log(f"look {rep.looks_done} ({max(rep.seeds.values())} seeds): {len(rep.wants)} of {len(rows)} rows "
                f"undecided get more seeds; {out_dir / 'report.md'} rewritten")
    return sequential.used(cells, rep), ran


def run_study(study: StudyConfig, out_dir: Path, workers: int | None = None, progress: bool = True,
              limit: int | None = None, batch_seeds: bool = False, report_only: bool = False,
              log=tqdm.write, command: str = "") -> dict:
    """`limit`: only the grid's first `limit` cells, reported on their own (scripts/bench_study.py).
    `batch_seeds`: cells that differ only in seed train as one batched model (studies/seed_groups.py), each
    seed as alone up to float rounding; off by default here (`posbench study --device cuda` turns it on, where a
    study model is launch-bound): on CPU at the presets' sizes it saves nothing
    measurable, and rounding differences grow over training into seed-sized differences of single cells
    (docs/performance.md), so today's numbers stay byte-identical unless a study asks for it.
    `report_only`: train nothing; every cell must be finished already (e.g. trained on another machine, its
    directory copied here), else a ConfigError names the missing ones.
    `command`: how the study was started, recorded in `<out>/result/run.json` (studies/published.py).
    Cells run seed-major (`grid/cells.pending`); the report is rewritten as each seed round completes, and an interrupt
    (Ctrl-C) writes the report of the cells finished by then and raises `Interrupted`."""
    out_dir = Path(out_dir)
    cells = expand(study)[:limit]  # a grid that cannot expand is refused before any directory is made
    check_finished_cells(out_dir, cells)  # before any work: old cells are never reported as this study's
    # it moves, deletes and makes nothing; a sequential study's looks say which cells it needs (`_sequential`)
    if report_only and study.sequential is None and (refusal := report_only_refusal(out_dir, cells)):
        raise ConfigError(refusal)
    with user_paths():  # --out is the user's: a file in its way, no permission to write there
        for sub in () if report_only else ("cells", "specs", "logs", "work"):
            (out_dir / sub).mkdir(parents=True, exist_ok=True)
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    if study.sequential is None:
        todo = _pending(study, cells, out_dir, workers, log)
        _train(study, cells, todo, out_dir, workers, progress, batch_seeds, log, Rounds(study, cells, out_dir, log))
    else:  # look after each round; only the rows still undecided get the next one (studies/sequential.py)
        cells, todo = _sequential(study, cells, out_dir, workers, progress, batch_seeds, log, report_only)
    report_cpu = time.process_time()
    results = [loads_cell(cell_path(out_dir, c).read_text(), str(cell_path(out_dir, c)), c.cell_id) for c in cells]
    plots = all_plots(results, out_dir, study.eval.confidence)
    table = write_outputs(out_dir, results, study, plots)
    if todo:  # the data form of what ran now (studies/published.py); a report-only rerun keeps the run's record
        write_result(out_dir, results, study, command, time.perf_counter() - t0, _cpu_seconds() - cpu0,
                     next((o.split("=", 1)[1] for o in study.overrides if o.startswith("train.device=")), "cpu"))
    return {"table": table, "seconds": time.perf_counter() - t0, "ran": len(todo), "cells": len(cells),
            "report_cpu_s": time.process_time() - report_cpu}
