"""A whole sweep, from its config to its report: plan every run (and the branch runs of smaller WSD budgets)
before anything trains, then either emit launch scripts, or train here (resumably), evaluate every final
checkpoint and write the comparison (report.md, results.csv, throughput.md, plots). `posbench sweep`
(posbench/cli/sweep.py, scripts/sweep.py) is its command line."""

from __future__ import annotations

from pathlib import Path

from posbench.errors import ConfigError, DataError
from posbench.grid.cells import pending
from posbench.grid.estimate import estimate_line
from posbench.sweeps import emit, evaluate, execute, sweep_plots, sweep_report, sweep_sequential
from posbench.sweeps.sweep_spec import SweepConfig, plan_runs


def run_sweep(sweep: SweepConfig, out: Path | None = None, *, emit_kind: str | None = None,
              report_only: bool = False, prepare_data: bool = False, workers: int | None = None,
              progress: bool = True, log=print) -> Path:
    """Run `sweep` into `out` (default runs/sweep_<name>); returns the report's path, or with `emit_kind`
    (torchrun | slurm) the launch script written instead. `report_only`: no training, every run must be
    finished (DataError naming the first five that are not; with sequential seeds, those the looks want)."""
    if emit_kind and sweep.sequential is not None:  # the looks decide between rounds, here: a launcher writes all
        raise ConfigError(f"--emit writes every run at once, and sequential seeds ({sweep.sequential.text()}) decide "
                          "between seed rounds which runs come next: run the sweep here, or give a seed list")
    workers = workers or sweep.workers
    out = Path(out or f"runs/sweep_{sweep.name}")
    if emit_kind:
        out = out.resolve()  # cluster nodes read these paths
    runs = plan_runs(sweep, out)
    if emit_kind:
        script = emit.EMITTERS[emit_kind](sweep, runs, out)
        log(f"{len(runs)} runs; wrote {script} and {out / 'configs'}/")
        return script
    cells = [execute.PretrainCell(r) for r in runs]  # the grid's cells (grid/cells.py)
    rep = None
    if sweep.sequential is not None:  # look after each round; only undecided rows get more (sweeps/sweep_sequential)
        if prepare_data and not report_only:
            execute.prepare_data(runs)
        runs, results, rep = sweep_sequential.run_looks(sweep, runs, out, report_only=report_only,
                                                        progress=progress, workers=workers, log=log)
    elif report_only:
        missing = [c.cell_id for c in cells if not c.is_done(out)]
        if missing:
            raise DataError(f"{len(missing)} runs are not finished ({', '.join(missing[:5])}"
                            f"{', ...' if len(missing) > 5 else ''}): run them first")
    else:
        if prepare_data:
            execute.prepare_data(runs)
        # the grid's order: seed-major, finished runs skipped, the estimate before the first
        todo = pending(cells, sweep.seeds, out, workers, log)
        execute.run_all(runs, out, progress=progress, workers=workers, todo=[c.item for c in todo])
    if rep is None:
        targets = [r for r in runs if sweep.eval_branches or not r.parent]
        results = evaluate.evaluate_all(targets, out, sweep.eval, progress=progress, workers=workers)
    figures = sweep_plots.all_plots(runs, results, out)
    sweep_report.write_report(sweep, runs, results, out, figures, rep=rep)
    log(f"report: {out / 'report.md'} (throughput: {out / 'throughput.md'})")
    return out / "report.md"


def estimate_text(sweep: SweepConfig, out: Path | None = None, workers: int | None = None) -> str:
    """The wall-time estimate of the runs `run_sweep` would train into `out`, read only: every run is planned and
    checked as for training, the finished ones are skipped, nothing is made or trained (`posbench sweep
    --estimate`). With sequential seeds: the first look's runs (seeds below `start`), as the run says before it."""
    out = Path(out or f"runs/sweep_{sweep.name}")
    runs = plan_runs(sweep, out)
    if sweep.sequential is not None:
        runs = [r for r in runs if r.seed < sweep.sequential.start]
    cells = [execute.PretrainCell(r) for r in runs]
    return estimate_line(cells, workers or sweep.workers, [c for c in cells if not c.is_done(out)],
                         "" if sweep.sequential is None else "this look")
