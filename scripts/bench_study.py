#!/usr/bin/env python
"""Where a study's CPU time goes: runs a study (default: the quickstart) and prints CPU-seconds per phase.

    python scripts/bench_study.py                        # the whole quickstart (60 cells)
    python scripts/bench_study.py --cells 4              # its first 4 cells: a quick measurement
    python scripts/bench_study.py --study configs/study/full.yaml --workers 2 --out /tmp/bench_full
    python scripts/bench_study.py --ab --out /tmp/bench_qs         # before (cells alone) and after (seeds batched)
    python scripts/bench_study.py --batched                        # after only

`--batched` trains the cells that differ only in seed as one batched model (studies/seed_groups.py); a group's
CPU seconds are shared evenly by its cells.

Phases, in CPU-seconds (user + sys, every process and thread; on a shared machine wall time says more
about the neighbours than about the study):
    startup  a worker's imports, the cell's task and config (the first cell of a worker pays the imports)
    rows     task example generation: the cached training rows (`cell.CachedRows`) and the eval rows
    train    the `train()` call: model build, the loop, its log rows and final checkpoint
    eval     scoring the learning-curve snapshots, the final scores, attention maps, reading the losses
    report   plots, report.md, results.json/csv (the parent process)
    other    everything else: process start-up and shut-down, the pool, the progress bar, cell JSON writes
Each cell's phases come from `<out>/logs/<cell_id>.cpu.json` (studies/study_runner.py writes them beside the cell's
log); the workers' total from getrusage(RUSAGE_CHILDREN), the parent's from process_time().

The FLOP floor is the training FLOPs (6 x parameters x tokens, from the cells' configs) over `workers` x the
matmul peak of one thread (fp32, measured here in thread CPU time at the study model's shape
1024x128 @ 128x384 and at 2048^3, through torch's BLAS and through oneDNN; the largest is used): no schedule of
this grid on this machine can train in less wall time, with every core doing nothing but matmuls at their best
rate.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

from posbench.cli.arg_types import positive_int
from posbench.cli.errors_cli import cli_entry
from posbench.studies.cell_files import cpu_path
from posbench.studies.study_compare import compare, read_cells
from posbench.studies.study_runner import run_study
from posbench.studies.study_spec import expand, load_study

PHASES = ("startup", "rows", "train", "eval", "report", "other")
PEAK_SHAPES = ((1024, 128, 384), (2048, 2048, 2048))  # (m, k, n): the study MLP's matmul, a big square one


def matmul_peaks() -> dict[str, float]:
    """The peaks at PEAK_SHAPES through torch's BLAS and, where torch has it, oneDNN (the faster one sets the
    FLOP floor: on AMD CPUs MKL runs AVX2 kernels, oneDNN AVX-512 ones)."""
    import torch

    from posbench.cpu_speed import matmul_rate

    libraries = ["torch"] + (["onednn"] if torch.backends.mkldnn.is_available() else [])
    return {f"{m}x{k}@{k}x{n} {lib}": matmul_rate(m, k, n, library=lib) for lib in libraries
            for m, k, n in PEAK_SHAPES}


def training_flops(cells) -> tuple[float, int]:
    """(6 x parameters x training tokens summed over `cells`, tokens), from each cell's resolved config."""
    from posbench.data.tasks.task import build_task
    from posbench.model.flops import model_stats
    from posbench.studies.cell_config import cell_config

    flops, tokens = 0.0, 0
    with tempfile.TemporaryDirectory() as tmp:  # cell_config names a work dir; nothing is written
        for cell in cells:
            task = build_task(cell.task)
            cfg = cell_config(cell, task, Path(tmp))
            n_tokens = cell.study.train.steps * cfg.train.global_batch_tokens
            flops += 6 * model_stats(cfg.model, cfg.pe, "cpu").params_total * n_tokens
            tokens += n_tokens
    return flops, tokens


def phase_totals(records: list[dict], parent_pid: int, parent_cpu: float, children_cpu: float,
                 report_cpu: float) -> dict[str, float]:
    """CPU-seconds per phase (PHASES) from the cells' records ({"pid", "seconds": {phase: s}}): what the
    records do not account for in the workers (children_cpu) and in the parent goes to `other`."""
    totals = dict.fromkeys(PHASES, 0.0)
    in_parent = in_workers = 0.0
    for rec in records:
        for phase, s in rec["seconds"].items():
            totals[phase if phase in totals else "other"] += s
        cell_total = sum(rec["seconds"].values())
        if rec["pid"] == parent_pid:  # workers=1: cells run in the parent process
            in_parent += cell_total
        else:
            in_workers += cell_total
    totals["report"] += report_cpu
    totals["other"] += max(0.0, children_cpu - in_workers) + max(0.0, parent_cpu - in_parent - report_cpu)
    return totals


def format_table(totals: dict[str, float], wall: float, n_cells: int, workers: int, flops: float,
                 tokens: int, peaks: dict[str, float]) -> str:
    total = sum(totals.values())
    lines = [f"{'phase':<8} {'CPU s':>9} {'share':>7} {'per cell':>9}"]
    for phase in PHASES:
        s = totals[phase]
        lines.append(f"{phase:<8} {s:>9.1f} {s / max(total, 1e-9):>7.1%} {s / max(n_cells, 1):>9.2f}")
    lines.append(f"{'total':<8} {total:>9.1f} {1:>7.0%} {total / max(n_cells, 1):>9.2f}")
    peak = max(peaks.values())
    floor_cpu = flops / peak
    lines += [
        "",
        f"wall: {wall:.1f} s for {n_cells} cells on {workers} workers "
        f"(CPU total / wall = {total / max(wall, 1e-9):.2f})",
        f"training: {tokens:,} tokens, {flops / 1e12:.2f} TFLOP (6 x params x tokens)",
        "matmul peak, 1 thread fp32: " + ", ".join(f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in peaks.items()),
        f"FLOP floor: {flops / 1e12:.2f} TFLOP / ({workers} x {peak / 1e9:.1f} GFLOP/s) = "
        f"{floor_cpu / workers:.1f} s wall ({floor_cpu:.1f} CPU-s); "
        f"train phase at {floor_cpu / max(totals['train'], 1e-9):.0%} of peak",
    ]
    return "\n".join(lines)


def measure(study, cells, workers: int, out: Path, limit: int | None, batch_seeds: bool) -> tuple[str, dict]:
    """Run the study's first `limit` cells into `out` (new or empty); the phase table and its numbers."""
    if (out / "cells").is_dir() and any((out / "cells").iterdir()):
        raise ValueError(f"{out} holds finished cells, which a study skips: pass an empty or new --out")
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    parent0 = time.process_time()
    wall0 = time.perf_counter()
    result = run_study(study, out, workers, progress=False, limit=limit, batch_seeds=batch_seeds)
    wall = time.perf_counter() - wall0
    # this process's CPU since it started (its imports are part of a study's cost) for the first run only
    parent_cpu = time.process_time() - (parent0 if _RUNS else 0.0)
    _RUNS.append(out)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers, joined when the pool shut down
    children_cpu = usage.ru_utime + usage.ru_stime - children0.ru_utime - children0.ru_stime
    records = [json.loads(cpu_path(out, c).read_text()) for c in cells]
    totals = phase_totals(records, os.getpid(), parent_cpu, children_cpu, result["report_cpu_s"])
    flops, tokens = training_flops(cells)
    peaks = matmul_peaks()
    table = format_table(totals, wall, len(cells), workers, flops, tokens, peaks)
    return table, {"study": study.name, "cells": len(cells), "workers": workers, "batch_seeds": batch_seeds,
                   "wall_s": wall, "cpu_s": totals, "flops": flops, "tokens": tokens, "peak_flops": peaks}


_RUNS: list[Path] = []  # runs measured by this process so far (the first one's CPU includes the imports)


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--study", default="quickstart", help="preset name or a study YAML file (default quickstart)")
    p.add_argument("--cells", type=positive_int, help="run only the grid's first N cells")
    p.add_argument("--steps", type=positive_int,
                   help="override study.train.steps (a quicker measurement; other numbers)")
    p.add_argument("--workers", type=positive_int, help="parallel cell processes (default: the study's `workers`)")
    p.add_argument("--out", help="an empty or new directory for the study's outputs (default: a new temp dir)")
    p.add_argument("--json", help="also write the numbers to this JSON file")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--batched", action="store_true",
                     help="cells that differ only in seed trained as one batched model (study --batch-seeds)")
    how.add_argument("--ab", action="store_true",
                     help="both: the cells alone into OUT/separate, then seed-batched into OUT/batched; prints both "
                          "tables, the wall-time ratio and whether the conclusions agree (scripts/compare_studies.py)")
    args = p.parse_args(argv)
    if args.json and not Path(args.json).parent.is_dir():  # before the study runs, not after it
        p.error(f"--json {args.json}: its folder {Path(args.json).parent} does not exist")
    study = load_study(args.study)
    if args.steps:
        study.train.steps = args.steps
    cells = expand(study)[: args.cells]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix=f"bench_study_{study.name}_"))
    workers = min(args.workers or study.workers, len(cells))
    modes = [("separate", False), ("batched", True)] if args.ab else [("batched" if args.batched else "separate",
                                                                         args.batched)]
    numbers = {}
    for name, batch in modes:
        where = out / name if args.ab else out
        table, numbers[name] = measure(study, cells, workers, where, args.cells, batch)
        print(f"study {study.name}, {name}: {len(cells)} of {len(expand(study))} cells, outputs in {where}\n")
        print(table + "\n")
    if args.ab:
        sep, bat = numbers["separate"], numbers["batched"]
        print(f"batched / separate: wall {bat['wall_s'] / sep['wall_s']:.2f}, train CPU "
              f"{bat['cpu_s']['train'] / max(sep['cpu_s']['train'], 1e-9):.2f}, total CPU "
              f"{sum(bat['cpu_s'].values()) / max(sum(sep['cpu_s'].values()), 1e-9):.2f}")
        ag = compare(read_cells(out / "separate"), read_cells(out / "batched"), confidence=study.eval.confidence,
                     n_boot=study.eval.n_boot)
        problems = ag.cells + ag.contradictions  # what makes compare_studies.py exit 1
        print("conclusions: " + ("the same (scripts/compare_studies.py)" if ag.same_conclusions else
                                 f"{len(problems)} differences:\n" + "\n".join(problems) if problems else
                                 "none to compare: no PE pair was judged in both runs (3 paired seeds needed)"))
    if args.json:
        Path(args.json).write_text(json.dumps(numbers if args.ab else numbers[modes[0][0]], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
