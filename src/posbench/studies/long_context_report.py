"""The one long-context report section, for a study's length grid (studies/length_grid.py) and a sweep's eval suite
`long_context` (evaluation/suites/long_context.py) alike: exact match per family and length with intervals over
seeds, effective length per row with its interval, and whether each row keeps multi-key NIAH above its
question-blind baseline at twice the training length, judged as one family of claims (studies/claims.py).

Each side adapts what it measured to one typed input: a `LengthGrid` per group of rows (a study's `vary` axes, a
sweep's run group), holding per row and seed a `SeedScores` (family -> length -> exact match, baseline and
question-blind pick, each the mean over depths). `grids_from_cells` reads a study's `CellResult.length_grid`,
`grids_from_suites` a sweep run's `results["suites"]["long_context"]`; everything after that is the same code for
both: intervals by `stats.DEFAULT_METHOD`, verdicts by `claims.check_claims`. It lives in studies/ beside the claims
it judges with, which grid/ may not import; sweeps/ imports studies/ already.

Effective length is the long_context eval suite's (evaluation/effective_length.py): per seed, on the mean over
families of each length's score (a family's score at a length is its mean over depths), the longest tested length
that keeps `keep` x the in-distribution score and stays above the baseline; its interval is over seeds. A seed whose
in-distribution score is not above the baseline has no effective length (n/a, counted beside the interval).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from posbench.evaluation.effective_length import effective_length
from posbench.evaluation.suites.long_context import blind_pick
from posbench.stats import DEFAULT_METHOD, interval, interval_label
from posbench.studies.cell_result import CellResult
from posbench.studies.claims import ClaimConfig, check_claims, claims_markdown, family_note, rules_note

MEAN = "mean of families"
MULTIKEY = "niah_multikey"
Table = dict[str, dict[int, float | None]]  # family -> tested length -> value (None: n/a)


def by_family(cells: list[dict], key: str) -> Table:
    """A study cell's grid cells as family -> length -> mean of `key` over the family's depths (None when any depth
    is n/a)."""
    by: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for c in cells:
        by[c["family"]][int(c["length"])].append(c.get(key))
    return {f: {L: None if any(v is None for v in vs) else float(np.mean(vs)) for L, vs in sorted(ls.items())}
            for f, ls in by.items()}


def with_mean(table: Table) -> Table:
    """`table` plus MEAN: the mean over families at each length (None when any family is n/a or untested there)."""
    lengths = sorted({L for ls in table.values() for L in ls})
    return {**table, MEAN: {L: None if any(table[f].get(L) is None for f in table)
                            else float(np.mean([table[f][L] for f in table])) for L in lengths}}


def family_scores(grid: dict, key: str = "exact") -> Table:
    """A study cell's `length_grid` as family -> length -> mean of `key` over depths, plus MEAN."""
    return with_mean(by_family(grid["cells"], key))


@dataclass(frozen=True)
class SeedScores:
    """One seed of one row: exact match, its baseline (chance or the commonest answer) and the question-blind pick,
    each family -> length -> mean over depths, families in the order the report shows them, then MEAN."""

    exact: Table
    baseline: Table
    guess: Table

    @classmethod
    def from_cells(cls, cells: list[dict]) -> SeedScores:
        """A study cell's `length_grid["cells"]`."""
        return cls(*(with_mean(by_family(cells, key)) for key in ("exact", "baseline", "guess")))

    @classmethod
    def from_suite(cls, suite: dict) -> SeedScores:
        """A run's `long_context` suite result, whose families carry their scores by length (keys: text)."""
        def table(key: str) -> Table:
            return with_mean({f: {int(L): v for L, v in fam[key].items()} for f, fam in suite["families"].items()})
        return cls(table("by_length"), table("baseline_by_length"), table("guess_by_length"))

    @property
    def families(self) -> list[str]:
        return [f for f in self.exact if f != MEAN]

    def effective(self, train_len: int, keep: float, family: str = MEAN) -> dict:
        return effective_length(self.exact.get(family, {}), self.baseline.get(family, {}), train_len, keep)


@dataclass(frozen=True)
class LengthGrid:
    """What the section reads for one group of rows: row -> seed -> scores, the training length, the tested lengths,
    the share of the in-distribution score effective length keeps, and how the prompts were asked where the
    scores do not say it (a sweep's shots; "" for a study, whose models were trained on the task)."""

    label: str  # the group, "" when the report has one
    train_len: int
    lengths: list[int]
    keep: float
    rows: dict[str, dict[int, SeedScores]]
    asked: str = ""

    @property
    def families(self) -> list[str]:
        return list(dict.fromkeys(f for seeds in self.rows.values() for s in seeds.values() for f in s.families))

    @property
    def n_seeds(self) -> int:
        return len({seed for seeds in self.rows.values() for seed in seeds})

    def per_row(self, family: str, length: int) -> dict[str, dict[int, float | None]]:
        """{row: {seed: exact match}} of one family (or MEAN) at one length."""
        return {row: {seed: s.exact.get(family, {}).get(length) for seed, s in seeds.items()}
                for row, seeds in self.rows.items()}

    def baseline(self, family: str, length: int) -> float | None:
        """Chance or the commonest answer at a length: the first seed's that has one (every row and seed is asked
        the same examples)."""
        return _first([s.baseline for seeds in self.rows.values() for s in seeds.values()], family, length)

    def guess(self, family: str, length: int) -> float | None:
        """The question-blind pick at a length, the first seed's that has one."""
        return _first([s.guess for seeds in self.rows.values() for s in seeds.values()], family, length)


def _first(tables: list[Table], family: str, length: int) -> float | None:
    return next((v for t in tables if (v := t.get(family, {}).get(length)) is not None), None)


def grids_of(entries: Iterable[tuple[str, str, int, SeedScores, int, list[int]]], keep: float,
             asked: str = "") -> list[LengthGrid]:
    """(group, row, seed, scores, training length, tested lengths) per cell or run -> one grid per group in the
    order first seen, its lengths its first entry's; groups are named only where there are several."""
    groups: dict[str, tuple[int, list[int], dict]] = {}
    for group, row, seed, scores, train_len, lengths in entries:
        groups.setdefault(group, (train_len, list(lengths), {}))[2].setdefault(row, {})[seed] = scores
    named = len(groups) > 1
    return [LengthGrid(group if named else "", train_len, lengths, keep, rows, asked)
            for group, (train_len, lengths, rows) in groups.items()]


def grid_results(results: list[CellResult]) -> list[CellResult]:
    return [r for r in results if r.length_grid is not None]


def grids_from_cells(results: list[CellResult], keep: float) -> list[LengthGrid]:
    """A study's cells with a length grid, one grid per combination of `vary` axes."""
    return grids_of(((" ".join(f"{k.split('.')[-1]}={v}" for k, v in r.axes.items()), r.pe, r.seed,
                      SeedScores.from_cells(r.length_grid["cells"]), r.length_grid["train_len"],
                      r.length_grid["lengths"]) for r in grid_results(results)), keep)


def suite_of(results: dict | None) -> dict | None:
    """A run's long_context suite result in its results payload, or None."""
    return (results or {}).get("suites", {}).get("long_context")


def grids_from_suites(runs: Iterable[tuple[str, str, int, dict | None]]) -> list[LengthGrid]:
    """A sweep's (run group, row, seed, results payload) per run, one grid per run group; runs without the suite
    are left out. keep and shots are the first run's: a sweep has one eval config."""
    suites = [(group, row, seed, lc) for group, row, seed, res in runs if (lc := suite_of(res))]
    if not suites:
        return []
    first = suites[0][3]
    shots = "zero-shot" if not first["shots"] else f"{first['shots']}-shot (demonstrations inside every length)"
    return grids_of(((group, row, seed, SeedScores.from_suite(lc), lc["train_len"], lc["lengths"])
                     for group, row, seed, lc in suites), first["keep"], f"Asked {shots}.")


def _titled(title: str, g: LengthGrid) -> str:
    return f"{title} ({g.label})" if g.label else title


def length_tables(g: LengthGrid, confidence: float, n_boot: int) -> str:
    """One table per family (and the mean over families): rows by length multiple, with the baselines."""
    heads = [f"{L // g.train_len}x ({L})" for L in g.lengths]
    families = g.families
    parts = []
    for fam in [*families, MEAN]:
        lines = [f"**{fam}**", "", "| row | " + " | ".join(heads) + " |", "|---|" + "---|" * len(g.lengths)]
        by_length = [g.per_row(fam, L) for L in g.lengths]
        for row in g.rows:
            cells = [interval(list(v[row].values()), confidence, DEFAULT_METHOD, n_boot, bounds=(0.0, 1.0)).fmt()
                     for v in by_length]
            lines.append(f"| {row} | " + " | ".join(cells) + " |")
        base = [g.baseline(fam, L) for L in g.lengths]
        lines.append("| *baseline* | " + " | ".join("n/a" if b is None else f"{100 * b:.1f}" for b in base) + " |")
        lines.append("| *question-blind pick* | " + " | ".join(_pick_cell(g, fam, L, families)
                                                               for L in g.lengths) + " |")
        parts += lines + [""]
    return "\n".join(parts)


def _pick_cell(g: LengthGrid, fam: str, L: int, families: list[str]) -> str:
    """A family's question-blind pick at L (certain with one candidate: said as n/a, blind_pick); for the mean over
    families, n/a when one family's is (a mean with a certain pick in it is no level to beat either)."""
    if fam == MEAN and any((g.guess(f, L) or 0.0) >= 1.0 for f in families):
        return "n/a (a family has one candidate in the context)"
    return blind_pick(g.guess(fam, L)).rstrip("%")


def effective_table(g: LengthGrid, confidence: float, n_boot: int) -> str:
    families = g.families
    label = interval_label(DEFAULT_METHOD, confidence, g.n_seeds)
    lines = [f"| row | effective length, tokens [{label}] | per seed | n/a seeds | "
             + " | ".join(f"{f} (mean)" for f in families) + " |", "|---|---|---|---|" + "---|" * len(families)]
    for row, seeds in g.rows.items():
        mine = [seeds[seed] for seed in sorted(seeds)]
        effs = [s.effective(g.train_len, g.keep)["length"] for s in mine]
        m = interval(effs, confidence, DEFAULT_METHOD, n_boot, bounds=(g.train_len, g.lengths[-1]))
        point = "n/a" if m.mean is None else f"{m.mean:.0f}" if m.n < 2 else \
            f"{m.mean:.0f} [no interval]" if m.lo is None else f"{m.mean:.0f} [{m.lo:.0f}, {m.hi:.0f}]"
        fams = []
        for fam in families:
            v = [x for x in (s.effective(g.train_len, g.keep, fam)["length"] for s in mine) if x is not None]
            fams.append(f"{np.mean(v):.0f} ({len(v)}/{len(mine)})" if v else "n/a")
        lines.append(f"| {row} | {point} | {', '.join('n/a' if e is None else str(e) for e in effs)} | "
                     f"{sum(e is None for e in effs)} | " + " | ".join(fams) + " |")
    return "\n".join(lines)


def multikey_claims(grids: list[LengthGrid], confidence: float, n_boot: int, multiple: int = 2) -> str:
    """`row > guess` on multi-key NIAH exact match at `multiple` x the training length, for every row of every
    grid, as one Holm family; empty when no grid has multi-key NIAH at that length."""
    jobs, blocks = [], []
    for g in grids:
        length = multiple * g.train_len
        guess = g.guess(MULTIKEY, length)
        if MULTIKEY not in g.families or length not in g.lengths or guess is None:
            continue
        metric = f"{MULTIKEY} exact match at {multiple}x ({length} tokens)"
        by_row = g.per_row(MULTIKEY, length)
        group = f"{g.label} {MULTIKEY} {multiple}x".strip()
        jobs += [(ClaimConfig(order=f"{row} > {guess:g}", metric=metric), {group: by_row}, True, "pts")
                 for row in g.rows]
        first = g.per_row(MULTIKEY, g.train_len)
        lines = ["| row | 1x (training length) | " + f"{multiple}x |", "|---|---|---|"]
        for row in g.rows:
            cells = [interval(list(v[row].values()), confidence, DEFAULT_METHOD, n_boot, bounds=(0.0, 1.0)).fmt()
                     for v in (first, by_row)]
            lines.append(f"| {row} | {cells[0]} | {cells[1]} |")
        blocks += [*([f"**{g.label}**", ""] if g.label else []),
                   f"{MULTIKEY} exact match %, guess {100 * guess:g}%. A row not above the guess at 1x has not "
                   "learned the lookup in distribution, so its verdict at 2x says nothing about extrapolation.", "",
                   *lines, ""]
    if not jobs:
        return ""
    checks, size = check_claims(jobs, confidence, n_boot)
    return "\n".join([*blocks, rules_note(confidence), "", family_note(size, confidence), "",
                      claims_markdown(checks)])


def long_context_section(grids: list[LengthGrid], confidence: float, n_boot: int) -> list[str]:
    """The report's lines for the length grids; [] when there are none."""
    parts = []
    for g in grids:
        pct = int(100 * confidence)
        parts += [_titled("## Long-context families: exact match by length", g), "",
                  " ".join(filter(None, [
                      f"Greedy decoding with the KV cache after each prompt, exact match of the whole answer, at "
                      f"{', '.join(str(L) for L in g.lengths)} tokens ({g.train_len} = the training length); a "
                      "family's score at a length is its mean over depths.", g.asked,
                      f"Mean % [{pct}% t-interval over seeds]; *baseline*: chance or the commonest answer, "
                      "*question-blind pick*: a reader that picks one of the context's candidates without reading "
                      "the question (n/a where the context holds one: the pick is then the retrieval itself)."])),
                  "",
                  length_tables(g, confidence, n_boot),
                  _titled("## Effective length per row", g), "",
                  f"Per seed, on the mean over families: the longest tested length keeping {g.keep:.0%} of the "
                  "in-distribution score and above the baseline (evaluation/effective_length.py); interval over "
                  "seeds, clipped to the tested lengths; the longest tested length is a lower bound where every "
                  "length passed. Per family: the mean over the seeds that have one (seeds with one / seeds).", "",
                  effective_table(g, confidence, n_boot), ""]
    claims = multikey_claims(grids, confidence, n_boot)
    if claims:
        parts += ["## Multi-key NIAH above its question-blind baseline at 2x", "", claims, ""]
    return parts
