"""gpu_check studies: posbench's own study and sweep commands run side by side on the lent GPU, stopped at the
budget, their output folders packed for the trip back.

A CPU study cell of the long-context preset costs ~9.5 CPU-minutes (configs/study/long_context.yaml), so its 11 rows
x 5 seeds take hours on 2 cores; on a GPU the cells train one per worker process, several workers sharing the
card. Each job is a list of commands run in order in one process group (a study's first seeds, then more seeds
into the same folder: finished cells are skipped, so a stop at the budget leaves whole seeds); at the budget every
group gets SIGTERM (a study writes no half-trained cell), then SIGKILL. Each job's folder is then packed, without
checkpoints, cached rows and scratch, into `<out>/<job>.tar.gz`; `posbench study ... --device cuda --report-only`
reports it where it is unpacked, and `posbench sweep ... --report-only` a sweep.

With `--plan` the call runs studies instead, in payoff order at as many seeds as fit (gpucheck/study_plan.py: a
probe on the device, then the planner's arithmetic), one after another with their seeds batched on the device
(`posbench study --device cuda` batches by default), each study's folder packed as soon as it finishes.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from posbench.gpucheck import common, study_plan
from posbench.gpucheck.common import Budget, ModeResult, Report

SKIP_DIRS = {"work", "rows", "__pycache__"}  # scratch and cached task rows: not results
SKIP_FILES = ("optim.pt", "rng_rank*.pt", ".lock")  # resuming state: the trip back carries results and final weights
PACK_S = 20.0  # seconds kept at the end for stopping the jobs and packing their folders


@dataclass
class Job:
    name: str
    out: Path  # the folder its commands write, packed at the end
    commands: list[list[str]]  # posbench argument lists, run in order, a later one also after an earlier one failed


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", default="long_context", help="studies: the study preset or YAML run on cuda")
    p.add_argument("--study-seeds", nargs="+", default=["0,1,2", "0,1,2,3,4"],
                   help="studies: seed lists run one after another into one folder (default: 3 seeds for every "
                        "row first, then 5)")
    p.add_argument("--study-workers", type=int, default=12, help="studies: cell processes sharing the GPU")
    p.add_argument("--sweep", default="long_context_mix",
                   help="studies: the sweep preset or YAML run beside the study ('' for none)")
    p.add_argument("--runs", default="runs/gpu", help="studies: where the jobs' folders are written")
    p.add_argument("--plan", action="store_true",
                   help="studies: run --plan-studies in order at as many seeds as fit the budget, each probed on "
                        "the device first, instead of --study and --sweep")
    p.add_argument("--plan-studies", nargs="+", type=study_plan.parse_ask,
                   default=list(study_plan.PAYOFF), metavar="STUDY:SEEDS:MIN",
                   help="studies --plan: study:seeds:min_seeds in payoff order (default: "
                        f"{' '.join(f'{a.study}:{a.seeds}:{a.min_seeds}' for a in study_plan.PAYOFF)})")
    p.add_argument("--plan-workers", type=int, default=4,
                   help="studies --plan: processes sharing the device, each training one batched group at a time")


def default_budget_s(dry_run: bool) -> float:
    return 300.0 if dry_run else 540.0


def jobs(args) -> list[Job]:
    device = "cpu" if args.dry_run else "cuda"
    smoke = ["--smoke"] if args.dry_run else []
    runs = Path(args.runs)
    study = Job("study", runs / "study", [
        ["study", args.study, "--device", device, "--workers", str(args.study_workers), "--out", str(runs / "study"),
         "--no-progress", "--seeds", *seeds.split(","), *smoke] for seeds in args.study_seeds])
    out = [study]
    if args.sweep:
        out.append(Job("sweep", runs / "sweep", [["sweep", args.sweep, "--prepare-data", "--no-progress", "--out",
                                                   str(runs / "sweep")]]))
    return out


def start(job: Job, out: Path | None) -> subprocess.Popen:
    """The job's commands as one shell in its own process group (one signal stops it all), output to its log
    (`<out>/<job>.log`)."""
    python = sys.executable
    src = str(Path(__file__).resolve().parents[2])
    # `;`: a later command runs after an earlier one's failure too (a study retries its failed cells)
    script = " ; ".join(" ".join([python, "-m", "posbench", *(_quote(a) for a in cmd)]) for cmd in job.commands)
    log = (out or job.out) / f"{job.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    paths = [src, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]  # no empty entry (= the cwd)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths),
           "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    print(f"[studies] {job.name}: {script}", flush=True)
    return subprocess.Popen(["bash", "-c", script], stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def stop(proc: subprocess.Popen, grace_s: float = 8.0) -> None:
    """SIGTERM to the job's process group (a study stops its cells without writing half-trained ones), SIGKILL
    after `grace_s`."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue


def kept(path: Path, folder: Path) -> bool:
    """Whether `pack` carries this file: not in SKIP_DIRS, not resuming state, and of a run's checkpoints only the
    newest step's (its weights, config and meta: enough to evaluate the run again where it is unpacked)."""
    rel = path.relative_to(folder)
    if SKIP_DIRS & set(rel.parts) or any(path.match(p) for p in SKIP_FILES):
        return False
    step = next((p for p in rel.parents if p.name.startswith("step_")), None)
    return step is None or step.name == max(d.name for d in (folder / step).parent.glob("step_*"))


def pack(folder: Path, archive: Path) -> int:
    """`folder` into `archive` (gzip tar, paths relative to the folder's parent), the files `kept` says; files
    packed."""
    n = 0
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(f".{archive.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.is_symlink() and kept(path, folder):
                tar.add(path, arcname=str(path.relative_to(folder.parent)))
                n += 1
    os.replace(tmp, archive)
    return n


def finished_cells(folder: Path) -> int:
    return len(list((folder / "cells").glob("*.json"))) if (folder / "cells").is_dir() else 0


def run(args, budget: Budget, out: Path | None) -> ModeResult:
    if args.plan:
        return run_plan(args, budget, out)
    report = Report("studies", out, meta={"env": common.environment(torch.device("cpu" if args.dry_run else "cuda")),
                                          "dry_run": args.dry_run})
    todo = jobs(args)
    procs = {job.name: (job, start(job, out), time.monotonic()) for job in todo}
    ended: dict[str, float] = {}
    while len(ended) < len(procs) and budget.left() > PACK_S:
        for name, (_, proc, t0) in procs.items():
            if name not in ended and proc.poll() is not None:
                ended[name] = time.monotonic() - t0
        time.sleep(1.0)
    for name, (job, proc, t0) in procs.items():
        stopped = proc.poll() is None
        stop(proc)
        wall = ended.get(name, time.monotonic() - t0)
        packed = pack(job.out, (out or job.out.parent) / f"{name}.tar.gz") if job.out.exists() else 0
        status = "stopped at the budget" if stopped else ("ok" if proc.returncode == 0 else "error")
        note = {"error": "SIGTERM at the budget; its finished cells and runs are packed"} if stopped else {}
        report.add("jobs", {"job": name, "status": status, **note, "returncode": proc.returncode,
                            "wall_s": round(wall, 1), "cells": finished_cells(job.out), "files_packed": packed,
                            "commands": [" ".join(c) for c in job.commands]})
    text = common.markdown_table("studies: jobs on the device", report.tables["jobs"], [
        ("job", "job", ""), ("status", "status", ""), ("wall_s", "wall s", ".0f"), ("cells", "study cells", ""),
        ("files_packed", "files packed", "")])
    failed = sum(r["status"] == "error" for r in report.tables["jobs"])
    return ModeResult([text], failed)


def plan_job(args, pick: study_plan.Pick) -> Job:
    """The study command of a planned pick: its seeds batched on the device (the default on cuda; asked for on
    the dry run's cpu), into `<runs>/<study>`."""
    device, folder = ("cpu" if args.dry_run else "cuda"), Path(args.runs) / pick.ask.name
    dry = ["--smoke", "--batch-seeds"] if args.dry_run else []
    return Job(pick.ask.name, folder, [["study", pick.ask.study, "--device", device, "--workers",
                                        str(args.plan_workers), "--out", str(folder), "--no-progress", "--seeds",
                                        *(str(s) for s in range(pick.seeds)), *dry]])


def run_plan(args, budget: Budget, out: Path | None) -> ModeResult:
    """Each asked study in order: probed, planned with the seconds left, run to its end or the budget, packed."""
    device = "cpu" if args.dry_run else "cuda"
    report = Report("studies", out, meta={"env": common.environment(torch.device(device)), "dry_run": args.dry_run,
                                          "plan": True})
    failed = 0
    for ask in args.plan_studies:
        row = {"study": ask.name, "asked": ask.seeds}
        try:
            probed = study_plan.probe(ask, device, args.dry_run, Path(args.runs) / f"probe_{ask.name}")
        except Exception as e:  # noqa: BLE001 - one study's failure is its row's; the next study still runs
            report.add("plan", {**row, "status": "error", "error": f"probe: {e.__class__.__name__}: {e}"[:400]})
            failed += 1
            continue
        (pick,) = study_plan.plan([ask], {ask.study: probed.seed_s}, budget.left() - PACK_S)
        row.update(rows=probed.rows, seed_s=round(probed.seed_s, 2), probe_s=round(probed.wall_s, 1),
                   seeds=pick.seeds, planned_s=round(pick.seconds, 1))
        if pick.seeds == 0:
            report.add("plan", {**row, "status": "skipped", "error": pick.reason})
            continue
        job = plan_job(args, pick)
        proc, t0 = start(job, out), time.monotonic()
        while proc.poll() is None and budget.left() > PACK_S:
            time.sleep(1.0)
        stopped = proc.poll() is None
        stop(proc)
        packed = pack(job.out, (out or job.out.parent) / f"{job.name}.tar.gz") if job.out.exists() else 0
        status = "stopped at the budget" if stopped else ("ok" if proc.returncode == 0 else "error")
        failed += status == "error"
        report.add("plan", {**row, "status": status, "wall_s": round(time.monotonic() - t0, 1),
                            "cells": finished_cells(job.out), "files_packed": packed,
                            "command": " ".join(job.commands[0])})
        if stopped:
            break
    text = common.markdown_table("studies --plan: studies on the device, in payoff order", report.tables.get(
        "plan", []), [("study", "study", ""), ("status", "status", ""), ("seeds", "seeds", ""),
                      ("seed_s", "s/seed (probe)", ".1f"), ("planned_s", "planned s", ".0f"),
                      ("wall_s", "wall s", ".0f"), ("cells", "cells", "")])
    return ModeResult([text], failed)
