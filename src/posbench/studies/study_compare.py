"""Do two runs of a study reach the same conclusions? (scripts/compare_studies.py: a study before and after a
change to how it trains, e.g. seeds batched against seeds alone, or another float rounding.)

Per task (and axes) every PE pair gets the report's verdict on `metric` (stats.pairwise: paired t tests over
seeds, Holm over the task's pairs): `>` or `<` (shown to differ, that way), `~` (shown the same within the
metric's margin) or `?` (inconclusive). Between two runs a pair's verdicts

- *contradict* when one run shows a > b and the other b > a: the runs disagree (exit 1);
- *differ* otherwise (one decided, the other not; or `~` beside an ordering, which can both hold for a
  difference inside the margin): reported, not a contradiction, since calibrated tests decide a true
  difference only some of the time;
- and each row's mean of every metric in `NUMBERS` is checked against the other run's t-interval for that row
  (reported: a 95% interval misses a rerun's mean now and then by design).

A sequential run (studies/sequential.py) is compared like a fixed one: its verdicts on the pair table's metric are the
ones its report gave at its boundary (kept in its results.json), and since its rule chose how many seeds each row got,
its cells are matched to the other run's by row (task, PE, axes), not by seed. Cells are matched by what they are
(task, PE, seed, axes), not only by id: runs whose cells differ (PEs renamed under
the same ids, a seed missing) are said to. Runs in which no pair was judged in both (two seeds, one PE, PEs renamed)
reach no conclusions to agree on: `Agreement.same_conclusions` is False and `nothing_judged` says why. Every cell is
read through studies/cell_result.py, so a value that is not a finite number is refused, never compared.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from posbench.errors import ConfigError, DataError
from posbench.stats import DEFAULT_METHOD, interval, pairwise
from posbench.studies.cell_result import CellProblem, CellResult, parse_cell
from posbench.studies.claims import DEFAULT_MARGINS
from posbench.studies.study_report import group_key

NUMBERS = ("id_acc", "ood_beyond_acc", "ood_acc", "id_loss", "ood_loss")
OPPOSITE = {">": "<", "<": ">"}


def _by_group(cells: list[CellResult], metric: str) -> dict[tuple, dict[str, dict[int, float]]]:
    out: dict[tuple, dict[str, dict[int, float]]] = defaultdict(dict)
    for r in cells:
        task, pe, axes = group_key(r)
        out[(task, axes)].setdefault(pe, {})[r.seed] = r.metric(metric)
    return out


def verdicts(cells: list[CellResult], metric: str, confidence: float, n_boot: int,
             looks: dict | None = None) -> dict[tuple, str]:
    """(task, axes, pe_a, pe_b) -> ">" / "<" (a shown above / below b), "~" (shown the same within the margin) or
    "?" (inconclusive), PEs in name order; pairs with fewer than two paired seeds are left out. `looks`: a sequential
    run's record (results.json `sequential`): on its metric, the verdicts its report gave."""
    if looks is not None and looks.get("metric") == metric:
        return {(p["task"], tuple(sorted((k, str(v)) for k, v in p["axes"].items())), p["a"], p["b"]): p["verdict"]
                for p in looks["pairs"] if p["verdict"] != "n/a"}
    out = {}
    for (task, axes), per_pe in _by_group(cells, metric).items():
        ordered = {pe: per_pe[pe] for pe in sorted(per_pe)}
        for p in pairwise(ordered, confidence, n_boot, DEFAULT_MARGINS.get(metric)):
            if p.p_differ is not None:
                out[(task, axes, p.a, p.b)] = p.verdict
    return out


def _rows(cells: list[CellResult], confidence: float, n_boot: int) -> dict[tuple, dict]:
    groups: dict[tuple, list[CellResult]] = defaultdict(list)
    for r in cells:
        groups[group_key(r)].append(r)
    return {key: {m: interval([c.metric(m) for c in rows], confidence, DEFAULT_METHOD, n_boot) for m in NUMBERS}
            for key, rows in groups.items()}


@dataclass
class Agreement:
    pairs: int = 0  # pairs judged in both runs
    same: int = 0  # of those, with the same verdict
    cells: list[str] = field(default_factory=list)  # the two runs hold different cells
    contradictions: list[str] = field(default_factory=list)
    differ: list[str] = field(default_factory=list)
    numbers: list[str] = field(default_factory=list)

    @property
    def nothing_judged(self) -> bool:
        """No PE pair was judged in both runs: there are no conclusions to agree on."""
        return self.pairs == 0

    @property
    def same_conclusions(self) -> bool:
        return not self.cells and not self.contradictions and not self.nothing_judged


def identity(r: CellResult) -> str:
    """What a cell is, whatever its id: "t a s0", with its axes."""
    task, pe, axes = group_key(r)
    return f"{task} {pe} s{r.seed}" + "".join(f" {k}={v}" for k, v in axes)


def check_cells(cells: list[CellResult], where: str) -> None:
    """DataError naming two cells that are one (the same task, PE, seed and axes under two ids)."""
    seen: dict[str, int] = {}
    for i, cell in enumerate(cells):
        first = seen.setdefault(identity(cell), i)
        if first != i:
            task, pe, axes = group_key(cell)
            raise DataError(f"{where}: cells {first} and {i} are both task {task}, PE {pe}, seed {cell.seed}"
                            f"{' at ' + str(dict(axes)) if axes else ''} ({cell.cell_id!r}); one run holds each "
                            "cell once: remove the copy")


def compare(before: list[CellResult], after: list[CellResult], metric: str = "ood_beyond_acc", confidence: float = 0.95,
            n_boot: int = 10000, slack: float = 1e-6,
            looks: tuple[dict | None, dict | None] = (None, None)) -> Agreement:
    """Every difference in conclusions between two runs of a study, sorted by kind. `slack`: how far outside an
    interval a mean may lie (an interval of identical seeds has width 0, and float rounding moves a loss in
    its 7th digit). `looks`: each run's sequential record (`read_looks`), None for a fixed run."""
    check_cells(before, "before")
    check_cells(after, "after")
    out = Agreement()
    row = lambda r: " ".join(str(x) for x in group_key(r))  # noqa: E731  a row, whatever seeds it got
    keys = (("rows (task, PE, axes)", row),) if any(x is not None for x in looks) else \
        (("cell ids", lambda r: r.cell_id), ("cells (task, PE, seed)", identity))
    for what, key in keys:
        ids_a, ids_b = {key(r) for r in before}, {key(r) for r in after}
        if ids_a != ids_b:
            out.cells.append(f"{what} differ: only before {sorted(ids_a - ids_b)[:5]}, "
                             f"only after {sorted(ids_b - ids_a)[:5]}")
    va, vb = (verdicts(c, metric, confidence, n_boot, lk) for c, lk in zip((before, after), looks))
    for key in sorted(set(va) & set(vb), key=str):
        out.pairs += 1
        a_v, b_v = va[key], vb[key]
        if a_v == b_v:
            out.same += 1
            continue
        task, axes, a, b = key
        line = f"{task}{dict(axes) or ''} {a} vs {b} on {metric}: before `{a_v}`, after `{b_v}`"
        (out.contradictions if OPPOSITE.get(a_v) == b_v else out.differ).append(line)
    ra, rb = _rows(before, confidence, n_boot), _rows(after, confidence, n_boot)
    for key in sorted(set(ra) & set(rb), key=str):
        for m in NUMBERS:
            sa, sb = ra[key][m], rb[key][m]
            if sa.mean is None or sb.mean is None:
                if (sa.mean is None) != (sb.mean is None):
                    out.numbers.append(f"{key[:2]} {m}: n/a in one run only")
                continue
            if sa.lo is None or sb.lo is None:  # one seed: no interval to hold the other mean against
                continue
            if not (sa.lo - slack <= sb.mean <= sa.hi + slack and sb.lo - slack <= sa.mean <= sb.hi + slack):
                out.numbers.append(f"{key[0]} {key[1]}{dict(key[2]) or ''} {m}: before {sa.mean:.4g} "
                                   f"[{sa.lo:.4g}, {sa.hi:.4g}], after {sb.mean:.4g} [{sb.lo:.4g}, {sb.hi:.4g}]: "
                                   f"a mean outside the other run's interval")
    return out


def read_looks(path: str | Path) -> dict | None:
    """A sequential run's record of its looks (results.json `sequential`, studies/sequential.record), None for a
    fixed run; ConfigError when it is not one."""
    p = Path(path)
    p = p / "results.json" if p.is_dir() else p
    looks = json.loads(p.read_text(errors="replace")).get("sequential")
    ok = looks is None or (isinstance(looks, dict) and isinstance(looks.get("pairs"), list) and all(
        isinstance(x, dict) and {"task", "axes", "a", "b", "verdict"} <= set(x) and isinstance(x["axes"], dict)
        for x in looks["pairs"]))
    if not ok:
        raise ConfigError(f"{p}: `sequential` is not a record of a sequential study's looks; rerun the study's "
                          "report (posbench study ... --report-only) to rewrite it")
    return looks


def read_published(folder: str | Path) -> tuple[list[CellResult], dict | None]:
    """A published result folder's cells (results/<name>/, or a run's <out>/result/: studies/published.py) and, for
    a sequential study, the record of its looks replayed from those cells, as its report wrote it."""
    from posbench.studies.published import Result
    from posbench.studies.sequential import record

    result = Result(Path(folder))
    return result.cells, None if result.looks is None else record(result.looks, result.study.sequential)


def read_cells(path: str | Path) -> list[CellResult]:
    """The cell results of a study's output directory (its results.json) or of a results.json file."""
    p = Path(path)
    p = p / "results.json" if p.is_dir() else p
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no results.json there; pass a study's --out directory or its results.json")
    try:
        data = json.loads(p.read_text(errors="replace"))
    except ValueError as e:
        raise ConfigError(f"{p}: not a study's results.json (not JSON: {e})") from None
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        raise ConfigError(f"{p}: not a study's results.json (no `cells` list)")
    results = []
    for i, cell in enumerate(cells):  # bad input as the file's other faults are (a ConfigError, exit 2)
        try:
            results.append(parse_cell(cell))
        except CellProblem as e:
            raise ConfigError(f"{p}: cell {i} is not a cell's result ({e}); rerun the study to rewrite it") from None
    try:
        check_cells(results, str(p))
    except DataError as e:
        raise ConfigError(str(e)) from None
    return results
