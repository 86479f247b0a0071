"""Sequential seeds for a sweep: the study's rule (studies/sequential.py) over pretraining runs.

    seeds: {start: 3, max: 10, step: 1}          # in a sweep spec; `posbench sweep ... --sequential-seeds 3:10:1`

A row is a PE or arm at one size (and one value of each `vary` axis); its main run and WSD branch runs share each
seed. Every row first gets `start` seeds. After each round, when all of the round's runs are trained and evaluated,
the looks judge every relation of the sweep's claims in every run group (a size at one budget) at the
group-sequential boundary, on the per-seed values the report judges (`sweep_report.build_tables`); a row gets `step`
more seeds only while a relation that names it, in one of its groups, is undecided, up to `max`. The sweep report
judges no pair table, so its claims are the relations (a sequential sweep without claims is refused when loaded).
`replay` is a pure function of the evaluated runs: a resumed sweep reuses every finished run and evaluation and
reaches the same decisions.
"""

from __future__ import annotations

from pathlib import Path

from posbench.errors import DataError
from posbench.grid.cells import pending
from posbench.studies.sequential import Point, Replay, Row, judge_looks, row_key
from posbench.sweeps import evaluate, execute
from posbench.sweeps.sweep_report import CLAIM_TABLES, build_tables
from posbench.sweeps.sweep_spec import Run, SweepConfig


def row_of(run: Run) -> Row:
    """The row a run belongs to: (size, PE or arm label, axes); its branch runs belong to the same row."""
    return row_key(run.size, run.pe, run.axes)


def rows_of(runs: list[Run]) -> list[Row]:
    return list(dict.fromkeys(map(row_of, runs)))


def wanted(runs: list[Run], rep: Replay) -> list[Run]:
    """The runs `rep.wants`: each wanting row's runs (main and branches) at seeds below the count it needs."""
    return [r for r in runs if r.seed < rep.wants.get(row_of(r), 0)]


def used(runs: list[Run], rep: Replay) -> list[Run]:
    """The runs the looks judged: each row's runs at seeds below the count it was judged on."""
    return [r for r in runs if r.seed < rep.seeds.get(row_of(r), 0)]


def replay(sweep: SweepConfig, runs: list[Run], results: dict[str, dict], rows: list[Row]) -> Replay:
    """The looks the evaluated runs (`results`: {run name: results payload}) allow for the sweep's `rows`: every
    claim judged per run group, as the report's claims section judges it."""
    judged = [r for r in runs if r.name in results]
    tables = build_tables(sweep, judged, results)

    def values(run: Run):
        def metric(name: str) -> float | None:
            table, column = CLAIM_TABLES[name]
            return tables[table].by_seed.get((run.group, run.pe, column), {}).get(run.seed)
        return metric

    points = [Point(row_of(r), (r.group, ()), r.pe, r.seed, values(r)) for r in judged]
    return judge_looks(sweep.sequential, points, rows, confidence=sweep.confidence, n_boot=sweep.n_boot,
                       claims=sweep.claims, pair_metric=None)


def plan_line(sweep: SweepConfig, runs: list[Run]) -> str:
    """What the sweep says before any work: the first look's runs and the most the looks can reach."""
    seq = sweep.sequential
    first = [r for r in runs if r.seed < seq.start]
    branches = " (with their branch runs)" if any(r.parent for r in runs) else ""
    return (f"sequential seeds {seq.text()} (start:max:step): the first look needs {len(first)} runs{branches}, "
            f"{len(rows_of(runs))} rows x {seq.start} seeds; a row undecided at every look reaches {seq.max} seeds: "
            f"at most {len(runs)} runs over {len(seq.looks)} looks")


def _missing(cells: list[execute.PretrainCell], out: Path, look: int) -> None:
    missing = [c.cell_id for c in cells if not c.is_done(out)]
    if missing:
        raise DataError(f"{len(missing)} runs are not finished ({', '.join(missing[:5])}"
                        f"{', ...' if len(missing) > 5 else ''}; look {look} of the sequential seeds wants them): "
                        "run them first")


def run_looks(sweep: SweepConfig, runs: list[Run], out: Path, *, report_only: bool,
              progress: bool, workers: int, log=print) -> tuple[list[Run], dict[str, dict], Replay]:
    """Look after look: train (`report_only`: only check they are finished) and evaluate the runs the last look
    wants, then look again, until every row has stopped. Returns the runs the looks judged, their results, the looks."""
    rows, results = rows_of(runs), {}
    log(plan_line(sweep, runs))
    rep = replay(sweep, runs, results, rows)
    while not rep.finished:
        want, look = wanted(runs, rep), rep.looks_done + 1
        cells = [execute.PretrainCell(r) for r in want]
        if report_only:
            _missing(cells, out, look)
        else:  # the grid's order: seed-major, finished runs skipped, this look's estimate before the first
            todo = pending(cells, sweep.seeds, out, workers, log, "this look")
            execute.run_all(want, out, progress=progress, workers=workers, todo=[c.item for c in todo])
        targets = [r for r in want if sweep.eval_branches or not r.parent]
        results.update(evaluate.evaluate_all(targets, out, sweep.eval, progress=progress, workers=workers))
        rep = replay(sweep, runs, results, rows)
        if not rep.finished:
            log(f"look {rep.looks_done} ({max(rep.seeds.values())} seeds): {len(rep.wants)} of {len(rows)} rows "
                "undecided get more seeds")
    chosen = used(runs, rep)
    return chosen, {r.name: results[r.name] for r in chosen if r.name in results}, rep
