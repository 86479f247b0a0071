"""Sequential seeds: which rows of a study get another seed after a look, and the verdicts the looks reached.

    seeds: {start: 3, max: 10, step: 1}          # in a study spec; `posbench study ... --sequential-seeds 3:10:1`

Every row (task, PE or arm, axes) first gets `start` seeds. At each look (start, start + step, ..., max seeds) the
judges test every relation of the report: each PE pair of a task's table ("they differ", "the same within the
margin", one Holm family per task) and each relation of each claim (one Holm family over the report), every p-value
read at the look's group-sequential boundary (stats_sequential.Boundary). A verdict reached at a look is kept: it is
the study's verdict on that relation, whatever later seeds of its rows show. A row gets the next look's seeds only
while some relation it takes part in is undecided and it is under `max`; the study ends when every row has stopped.

`replay` is a pure function of the finished cells: the runner calls it after each round to learn which cells to train
next, the report calls it to print the rule, the looks and why each row stopped, and a resumed or copied study reaches
the same decisions from the same cells. Underneath it, `judge_looks` takes rows x seeds x metric values (`Point`s) and
gives the decisions: a study feeds it its cells, a sweep (sweeps/sweep_sequential.py) its evaluated runs, so both
decide by one function and report through one `section`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from posbench.config_loader import Checked, nearest
from posbench.errors import ConfigError, brief
from posbench.stats import DEFAULT_METHOD, INTERVALS, pairwise
from posbench.stats_sequential import DEFAULT_SPENDING, SPENDING, Boundary
from posbench.studies.claims import DEFAULT_MARGINS, check_claims
from posbench.studies.rows import group_key

MAX_SEEDS = 100  # a bound on what a spec may ask for (the boundary simulates DRAWS x max values)
METRIC = "ood_beyond_acc"  # the pair table's metric, as study_report.comparisons judges it


@dataclass(frozen=True)
class SequentialSeeds(Checked):
    start: int = 3  # seeds every row gets before the first look
    max: int = 10  # no row gets more
    step: int = 1  # seeds added per look to each row still undecided
    spending: str = DEFAULT_SPENDING  # stats_sequential.SPENDING

    def check(self) -> None:
        # the messages name `seeds.*` alone: a study's and a sweep's spec both hold this value
        least = INTERVALS[DEFAULT_METHOD].min_seeds
        if self.start < least:
            raise ConfigError(f"seeds.start is {self.start}: sequential seeds start at >= {least} seeds "
                              f"(fewer give no interval and decide nothing)")
        if not self.start <= self.max <= MAX_SEEDS:
            raise ConfigError(f"seeds.max is {self.max}: it must be >= start ({self.start}) and <= {MAX_SEEDS}")
        if self.step < 1:
            raise ConfigError(f"seeds.step is {self.step}: it must be >= 1 (seeds added per look)")
        if self.spending not in SPENDING:
            raise ConfigError(f"seeds.spending `{self.spending}` is not one of {sorted(SPENDING)}"
                              + nearest(self.spending, SPENDING))

    @property
    def looks(self) -> tuple[int, ...]:
        """The seed counts at which the judges look: start, start + step, ..., and max last."""
        return (*range(self.start, self.max, self.step), self.max)

    def text(self) -> str:
        return f"{self.start}:{self.max}:{self.step}"


def parse_sequential(text: str) -> SequentialSeeds:
    """`START:MAX[:STEP]` (the command line's form) -> SequentialSeeds; ConfigError naming the form otherwise."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(p.strip().lstrip("-").isdigit() for p in parts):
        raise ConfigError(f"--sequential-seeds {text!r}: write START:MAX or START:MAX:STEP, e.g. 3:10:1")
    return SequentialSeeds(*map(int, parts))


def split_seeds(seeds, sequential: SequentialSeeds | None, where: str) -> tuple[list, SequentialSeeds | None]:
    """A spec's `seeds` field (a list, or `{start, max, step}`) -> (every seed a row may get, the sequential rule or
    None): the mapping form gives seeds 0 .. max - 1. A config written back (to_dict) holds both; they must agree.
    `where`: the spec's name in messages (`study`, `sweep`)."""
    if isinstance(seeds, SequentialSeeds):
        if sequential is not None and sequential != seeds:
            raise ConfigError(f"{where}: give sequential seeds once, as `seeds: {{start, max, step}}`")
        return list(range(seeds.max)), seeds
    if sequential is not None and any(not 0 <= s < sequential.max for s in seeds):
        raise ConfigError(f"{where}: `sequential` draws seeds 0 .. {sequential.max - 1}, got "
                          f"{brief(seeds)}; write `seeds: {{start, max, step}}` alone")
    return seeds, sequential


Row = tuple  # (task or size, row label, axes as sorted (key, str(value)) pairs): study_report.group_key's form


def row_key(task: str, label: str, axes: dict) -> Row:
    return (task, label, tuple(sorted((k, str(v)) for k, v in axes.items())))


@dataclass(frozen=True)
class Point:
    """One finished cell as the looks read it. `row`: what gets seeds (a study's (task, label, axes), a sweep's (size,
    label, axes)); `table`: the (name, axes) its relations are judged in, beside the other rows of that table (a
    study's (task, axes); a sweep's (run group, ()), one per budget of its row); `metric(name)`: its value."""

    row: Row
    table: tuple
    pe: str
    seed: int
    metric: Callable[[str], float | None]


@dataclass
class Verdict:
    """A relation's state: `state` ">", "<", "~", "?" for a pair; "shown", "refuted", "?" for a claim's relation;
    `seeds`: the look that decided it (None: undecided); p's on the fixed test's scale (Boundary.scaled)."""

    state: str
    seeds: int | None = None
    p_a: float | None = None  # pair: p of "they differ"; claim relation: p of "shown"
    p_b: float | None = None  # pair: p of "the same"; claim relation: p of "refuted"


@dataclass
class Replay:
    boundary: Boundary
    looks_done: int = 0  # how many looks were made
    seeds: dict[Row, int] = field(default_factory=dict)  # seeds each row has been judged on
    why: dict[Row, str] = field(default_factory=dict)  # why a row stopped (rows still running: absent)
    pairs: dict[tuple, Verdict] = field(default_factory=dict)  # (task, axes, a, b) -> verdict
    relations: dict[tuple, Verdict] = field(default_factory=dict)  # (claim order, group label, index) -> verdict
    wants: dict[Row, int] = field(default_factory=dict)  # rows that need cells: the seeds they need now

    @property
    def finished(self) -> bool:
        return not self.wants

    def pair(self, task: str, axes: tuple, a: str, b: str) -> Verdict | None:
        """The verdict on a vs b (either order), oriented as asked."""
        v = self.pairs.get((task, axes, a, b))
        if v is not None:
            return v
        v = self.pairs.get((task, axes, b, a))
        flip = {">": "<", "<": ">"}
        return None if v is None else Verdict(flip.get(v.state, v.state), v.seeds, v.p_a, v.p_b)


def _label(task: str, axes: tuple) -> str:
    return " ".join([task, *(f"{k.split('.')[-1]}={v}" for k, v in axes)])


def _values(points: list[Point], metric: str, upto: dict[Row, int]) -> dict[tuple, dict[str, dict]]:
    """{table: {pe: {seed: value}}} over the first upto[row] seeds of each row."""
    out: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for p in points:
        if p.row in upto and p.seed < upto[p.row]:
            out[p.table].setdefault(p.pe, {})[p.seed] = p.metric(metric)
    return out


def _pairs_look(points, metric: str, confidence: float, n_boot: int, rep: Replay, look: int, n: int) -> None:
    b, alpha = rep.boundary, rep.boundary.alpha
    margin = DEFAULT_MARGINS.get(metric)
    for (task, axes), per_pe in _values(points, metric, rep.seeds).items():
        for p in pairwise(dict(sorted(per_pe.items())), confidence, n_boot, margin):
            key = (task, axes, p.a, p.b)  # PEs in name order, as studies/study_compare.py keys its verdicts
            if key in rep.pairs and rep.pairs[key].seeds is not None:
                continue  # decided at an earlier look: kept
            pd, ps = b.scaled(p.p_differ, look, True), b.scaled(p.p_same, look, False)
            state = "?"
            if pd is not None and pd < alpha:
                state = ">" if p.diff.mean > 0 else "<"
            elif ps is not None and ps < alpha:
                state = "~"
            rep.pairs[key] = Verdict(state, None if state == "?" else n, pd, ps)
            if pd is None:
                rep.pairs[key].state = "n/a"  # no values to judge: holds no row


def _claims_look(claims, points, confidence: float, n_boot: int, rep: Replay, look: int, n: int) -> dict[tuple, tuple]:
    """Judge every claim at this look; returns {relation key: (task, axes, a, b)} (b None for a number)."""
    if not claims:
        return {}
    b, alpha = rep.boundary, rep.boundary.alpha
    jobs = []
    where = {}
    for claim in claims:
        groups = {}
        for (task, axes), per_pe in _values(points, claim.metric, rep.seeds).items():
            groups[_label(task, axes)] = per_pe
            where[_label(task, axes)] = (task, axes)
        jobs.append((claim, groups, True, "pts"))
    checks, _ = check_claims(jobs, confidence, n_boot)
    members = {}
    for c in checks:
        for i, r in enumerate(c.relations):
            key = (c.claim.order, c.label, i)
            members[key] = (*where[c.label], r.a, r.b)
            if key in rep.relations and rep.relations[key].seeds is not None:
                continue
            if r.p_shown_adj is None:
                rep.relations[key] = Verdict("n/a")
                continue
            ps = b.scaled(r.p_shown_adj, look, r.rel != "~")
            pr = b.scaled(r.p_refuted_adj, look, True)
            state = "shown" if ps < alpha else ("refuted" if pr is not None and pr < alpha else "?")
            rep.relations[key] = Verdict(state, None if state == "?" else n, ps, pr)
    return members


def _open_relations(owned: set, rep: Replay, members: dict) -> list[str]:
    """The undecided relations a row takes part in: those of a table it sits in (`owned`: its (table, pe) pairs)
    that name its PE or arm."""
    def takes_part(t, x, a, b) -> bool:
        return ((t, x), a) in owned or ((t, x), b) in owned

    out = [f"{a} vs {b}" for (t, x, a, b), v in rep.pairs.items() if v.state == "?" and takes_part(t, x, a, b)]
    out += [f"claim `{key[0]}` ({a} vs {b})" for key, (t, x, a, b) in members.items()
            if rep.relations[key].state == "?" and takes_part(t, x, a, b)]
    return out


def judge_looks(seq: SequentialSeeds, points: list[Point], rows: list[Row], *, confidence: float, n_boot: int,
                claims: list, pair_metric: str | None = METRIC) -> Replay:
    """The looks `points` (finished cells' values) allow, in order, for `rows`: each look judges every pair of each
    table on `pair_metric` (None: no pair table) and every relation of `claims`, all at the boundary; rows whose
    relations are all decided, or at `max`, stop. Ends at the first look some running row has no points for
    (`wants` names them and the seeds they need) or when every row has stopped."""
    rep = Replay(Boundary(seq.looks, confidence, seq.spending))
    have: dict[Row, set] = defaultdict(set)
    owned: dict[Row, set] = defaultdict(set)
    for p in points:
        have[p.row].add(p.seed)
        owned[p.row].add((p.table, p.pe))
    running = list(dict.fromkeys(rows))
    for look, n in enumerate(seq.looks):
        short = [row for row in running if not set(range(n)) <= have[row]]
        if short:
            rep.wants = {row: n for row in short}
            return rep
        for row in running:
            rep.seeds[row] = n
        if pair_metric is not None:
            _pairs_look(points, pair_metric, confidence, n_boot, rep, look, n)
        members = _claims_look(claims, points, confidence, n_boot, rep, look, n)
        rep.looks_done = look + 1
        still = []
        for row in running:
            open_ = _open_relations(owned[row], rep, members)
            if not open_:
                rep.why[row] = f"every relation it takes part in decided by {n} seeds"
            elif n == seq.looks[-1]:
                rep.why[row] = f"reached max ({n} seeds) with {len(open_)} undecided: {', '.join(open_[:4])}" + (
                    ", ..." if len(open_) > 4 else "")
            else:
                still.append(row)
        running = still
    return rep


def replay(study, results: list, rows: list[Row]) -> Replay:
    """A study's looks over its finished cells (studies/cell_result.CellResult) for its `rows`: the pairs of each
    task's table on the report's metric and every claim (`judge_looks`)."""
    points = [Point(key, (key[0], key[2]), r.pe, r.seed, r.metric) for r in results for key in [group_key(r)]]
    return judge_looks(study.sequential, points, rows, confidence=study.eval.confidence, n_boot=study.eval.n_boot,
                       claims=study.claims)


def rows_of(cells) -> list[Row]:
    """The rows of a study's cells (studies/study_spec.Cell), in the grid's order."""
    return list(dict.fromkeys(row_key(c.task.name, c.label, c.axes) for c in cells))


def wanted(cells, rep: Replay) -> list:
    """The cells `rep.wants`: each wanting row's seeds below the count it needs."""
    return [c for c in cells if c.seed < rep.wants.get(row_key(c.task.name, c.label, c.axes), 0)]


def used(cells, rep: Replay) -> list:
    """The cells the looks judged: each row's seeds below the count it was judged on."""
    return [c for c in cells if c.seed < rep.seeds.get(row_key(c.task.name, c.label, c.axes), 0)]


def record(rep: Replay, seq: SequentialSeeds) -> dict:
    """What results.json keeps of the looks: the rule, and each pair's verdict with the seeds that decided it (None:
    undecided) and each row's seeds and why it stopped, so a comparison of runs (studies/study_compare.py) reads the
    verdicts the report gave."""
    return {"seeds": {"start": seq.start, "max": seq.max, "step": seq.step, "spending": seq.spending},
            "boundary": rep.boundary.describe(), "metric": METRIC,
            "pairs": [{"task": t, "axes": dict(x), "a": a, "b": b, "verdict": v.state, "seeds": v.seeds}
                      for (t, x, a, b), v in rep.pairs.items()],
            "rows": [{"task": t, "pe": pe, "axes": dict(x), "seeds": n, "why": rep.why.get((t, pe, x), "still running")}
                     for (t, pe, x), n in rep.seeds.items()]}


PAIRS_AND_CLAIMS = "every pair of the comparison tables and every claim's relations"  # what a study's looks judge


def section(rep: Replay, spec, *, judged: str = PAIRS_AND_CLAIMS, group: str = "task",
            what: str = "study") -> list[str]:
    """report.md's account: the rule, the looks made, and per row its seeds and why it stopped. `spec`: the study or
    sweep config (its `sequential` rule); `judged`: what the looks test; `group`: the first column's name (a study's
    task, a sweep's size); `what`: "study" or "sweep"."""
    seq = spec.sequential
    lines = ["## Sequential seeds", "",
             f"Rule: every row starts with {seq.start} seeds; after each look the judges test {judged}, each "
             "p-value read at the group-sequential boundary "
             f"({rep.boundary.describe()}; docs/statistics.md, \"Sequential seeds\"), and a row gets {seq.step} more "
             f"seed{'s' if seq.step > 1 else ''} only while a relation it takes part in is undecided, up to "
             f"{seq.max}. A verdict reached at a look is kept. Looks made: {rep.looks_done} of {len(seq.looks)} "
             f"({', '.join(map(str, seq.looks[:rep.looks_done]))} seeds)"
             + ("" if rep.finished else f"; the {what} is not finished (run it again to continue)") + ".", "",
             f"| {group} | row | seeds | why it stopped |", "|---|---|---|---|"]
    for row, n in rep.seeds.items():
        task, label, axes = row
        lines.append(f"| {_label(task, axes)} | {label} | {n} | {rep.why.get(row, 'still running')} |")
    return [*lines, ""]


def at_the_looks(checks, rep: Replay) -> tuple[list[str], str]:
    """A report's claims judged as the looks judged them (claims.report_section's `looks`): each relation's p-values
    set to its deciding look's (or the last look's); returns the note and the rule the verdict lines name."""
    for c in checks:
        for i, r in enumerate(c.relations):
            v = rep.relations.get((c.claim.order, c.label, i))
            if v is not None and v.state != "n/a":
                r.p_shown_adj, r.p_refuted_adj = v.p_a, v.p_b
    note = (f"Sequential seeds: each relation judged at the boundary ({rep.boundary.describe()}) at every look its "
            "rows took part in, its verdict kept from the look that decided it; p-values are on the fixed test's "
            "scale (p x alpha / the look's level).")
    return [note], f"at the sequential boundary ({rep.boundary.describe()})"


def each_row_label(confidence: float) -> str:
    """What a table's intervals are when each row has its own seed count (the section lists them)."""
    return f"{100 * confidence:g}% {INTERVALS[DEFAULT_METHOD].name} over each row's seeds"
