"""Published claims checked against our seeds: an ordering of PEs on one metric, with a three-valued verdict.

A claim is a chain of PE names (or numbers) joined by relations, as papers state their results:

    order: "none >= t5 > alibi > rope ~ learned"      # Kazemnejad et al. 2023, OOD accuracy
    order: "rope > alibi ~ 0"                         # ppl slope: RoPE rises, ALiBi stays flat
    margin: 0.02                                      # what "no worse" and "the same" allow, in the metric's units

Each adjacent pair is judged on the per-seed values of the metric. Between two PEs the seeds are paired
(same data order, same evaluation examples), so the judge is a Student t test on the per-seed differences
a - b (posbench.stats.decide; the interval printed beside it is the matching t-interval); against a number c
it is a's values minus c:

    a > b    shown when the interval lies above 0; refuted when it lies below 0
    a >= b   (no worse) shown when its lower end lies above -margin; refuted when its upper end lies below
    a ~ b    (the same) shown when the 1 - 2 alpha interval lies inside +-margin (two one-sided tests);
             refuted when the interval lies wholly outside +-margin

Anything else is *inconclusive*, with the seeds that would decide it at the observed spread. A claim is
*reproduced* when every relation is shown, *not reproduced* when one is refuted, otherwise inconclusive.
Margins come from the claim (`margin`) or `DEFAULT_MARGINS` per metric; `>=` and `~` on a metric with neither
are refused when the config loads. A report judges all its claims as one family: Holm over every relation
(`check_claims`), so a "reproduced" anywhere in it is wrong at most 1 - confidence of the time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from posbench.config_loader import Checked, nearest
from posbench.errors import ConfigError
from posbench.stats import (
    DEFAULT_METHOD,
    Decision,
    Summary,
    checked,
    decide,
    holm,
    interval,
    paired_diffs,
    seeds_needed,
)

# What difference a claim's `>=` and `~` ignore, per metric, in its units: 2 accuracy points, 0.02 nats of
# loss, 0.05 perplexity per doubling of the context. A statement of what matters, never read off the seeds.
DEFAULT_MARGINS = {"id_acc": 0.02, "ood_beyond_acc": 0.02, "ood_acc": 0.02, "ood_within_acc": 0.02, "gap": 0.02,
                   "id_exact": 0.02, "ood_exact": 0.02,
                   "id_loss": 0.02, "ood_loss": 0.02, "ppl_slope": 0.05}

_SPLIT = re.compile(r"\s*(>=|>|~)\s*")


@dataclass(frozen=True)
class ClaimConfig(Checked):
    order: str = ""  # e.g. "none >= t5 > alibi > rope ~ learned"
    metric: str = "ood_beyond_acc"  # which per-seed value is compared
    tasks: list[str] = field(default_factory=list)  # studies: the tasks it is about ([] = every task)
    source: str = ""  # where the claim is published
    differences: str = ""  # how our setup differs from the source's, printed with a failed verdict
    margin: float | None = None  # in the metric's units; None: DEFAULT_MARGINS[metric]

    def check(self) -> None:
        _, rels = parse_order(self.order)
        if self.margin is not None and not (math.isfinite(self.margin) and self.margin > 0):
            raise ConfigError(f"claim `{self.order}`: margin {self.margin} must be a positive number in the "
                              f"metric's units (e.g. 0.02 for 2 accuracy points)")
        if self.effective_margin is None and any(r != ">" for r in rels):
            raise ConfigError(f"claim `{self.order}`: `>=` and `~` need a margin and metric `{self.metric}` has no "
                              f"default one; add `margin:` (in the metric's units) to the claim")

    @property
    def effective_margin(self) -> float | None:
        return self.margin if self.margin is not None else DEFAULT_MARGINS.get(self.metric)

    @property
    def names(self) -> list[str]:
        return [t for t in parse_order(self.order)[0] if not _is_number(t)]


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def parse_order(order: str) -> tuple[list[str], list[str]]:
    """("none >= t5 > alibi") -> (["none", "t5", "alibi"], [">=", ">"]); ConfigError when malformed."""
    parts = _SPLIT.split(order.strip())
    terms, rels = parts[0::2], parts[1::2]
    if len(terms) < 2 or any(not t or not re.fullmatch(r"[\w.+-]+", t) for t in terms):
        raise ConfigError(f"claim order {order!r}: write PE names (or numbers) joined by >, >= or ~, "
                          "e.g. 'none >= t5 > alibi > rope ~ learned'")
    if all(_is_number(t) for t in terms[:2]) or any(_is_number(a) and _is_number(b)
                                                    for a, b in zip(terms, terms[1:])):
        raise ConfigError(f"claim order {order!r}: two numbers side by side compare nothing")
    names = [t for t in terms if not _is_number(t)]
    twice = sorted({t for t in names if names.count(t) > 1})
    if twice:  # `rope > rope` compares a PE with itself; `rope > alibi > rope` contradicts itself
        raise ConfigError(f"claim order {order!r}: {', '.join(f'`{t}`' for t in twice)} named twice; a claim "
                          "orders different PEs, each named once")
    return terms, rels


def check_names(names: list[str], valid: list[str], where: str, kind: str) -> None:
    for name in names:
        if name not in valid:
            raise ConfigError(f"{where}: unknown {kind} `{name}`{nearest(name, valid)}; this grid has {valid}")


@dataclass
class Relation:
    a: str
    rel: str
    b: str
    diff: Summary  # t-interval of a - b (paired over seeds), or of a - constant
    decision: Decision | None = None  # None: built by hand without a test (holds reads the interval)
    diffs: list[float] = field(default_factory=list)
    alpha: float = 0.05
    p_shown_adj: float | None = None  # after the report's adjustment for many relations (None: not adjusted)
    p_refuted_adj: float | None = None
    family: int = 1  # relations adjusted together (Holm): the seeds estimate plans for the strictest step

    @property
    def margin(self) -> float | None:
        return None if self.decision is None else self.decision.margin

    @property
    def holds(self) -> bool | None:
        """True: shown; False: refuted; None: inconclusive (one seed, no margin, or the seeds cannot decide)."""
        if self.decision is None or self.diff.mean is None or self.diff.n < 2:
            return None
        return self.decision.state(self.alpha, self.p_shown_adj, self.p_refuted_adj)

    @property
    def p_shown(self) -> float | None:
        return self.p_shown_adj if self.p_shown_adj is not None else (self.decision and self.decision.p_shown)

    def seeds_to_decide(self) -> int | None:
        """Seeds that would decide this relation at the observed mean and spread, at the level Holm's first
        step asks of it (alpha / family): an upper estimate, as later steps ask less."""
        return seeds_needed(self.diffs, 1 - self.alpha / self.family, self.rel, self.margin)


def _values(term: str, by_pe: dict[str, dict]) -> dict | float:
    return float(term) if _is_number(term) else by_pe.get(term, {})


def judge(claim: ClaimConfig, by_pe: dict[str, dict], confidence: float, n_boot: int) -> list[Relation]:
    """Every relation of the chain on `by_pe` = {pe: {seed: value}}, each at level 1 - confidence. One claim
    needs no adjustment (it is reproduced only if every relation is shown: an intersection-union test);
    `check_claims` adjusts a report's many claims together."""
    terms, rels = parse_order(claim.order)
    margin = claim.effective_margin
    out = []
    for a, rel, b in zip(terms, rels, terms[1:]):
        va, vb = _values(a, by_pe), _values(b, by_pe)
        if isinstance(va, float):  # constant on the left: flip to keep "PE - constant"
            diffs = [va - x for x in checked(vb.values()) if x is not None]
        elif isinstance(vb, float):
            diffs = [x - vb for x in checked(va.values()) if x is not None]
        else:
            diffs = paired_diffs(va, vb)
        out.append(Relation(a, rel, b, interval(diffs, confidence, DEFAULT_METHOD, n_boot),
                            decide(diffs, rel, margin), diffs, 1 - confidence))
    return out


def _fmt_margin(margin: float | None, pct: bool, unit: str) -> str:
    if margin is None:
        return "none"
    return f"+-{100 * margin:g} {unit}" if pct else f"+-{margin:g} {unit}"


def _undecided(r: Relation, pct: bool, unit: str) -> str:
    if r.diff.n < 2:
        return f"`{r.a} {r.rel} {r.b}` has {r.diff.n} seed(s)"
    need = r.seeds_to_decide()
    seeds = ("no number of seeds decides it at this mean" if need is None else
             f"about {need} seeds would decide it at this spread"
             + (f", Holm over {r.family} included" if r.family > 1 else ""))
    margin = "" if r.rel == ">" else f", margin {_fmt_margin(r.margin, pct, unit)}"
    diff = f"{r.a} - {r.b} = {r.diff.fmt(pct)} {unit}"
    return f"`{r.a} {r.rel} {r.b}` neither shown nor refuted ({diff}{margin}; {seeds})"


def verdict(relations: list[Relation], pct: bool = True, unit: str = "pts") -> str:
    """One line: reproduced / not reproduced (naming each refuted relation and its interval) / inconclusive
    (naming each undecided relation and the seeds that would decide it)."""
    states = [r.holds for r in relations]
    if all(s is True for s in states):
        return "reproduced"
    if any(s is False for s in states):
        failed = "; ".join(f"`{r.a} {r.rel} {r.b}` refuted ({r.a} - {r.b} = {r.diff.fmt(pct)} {unit})"
                           for r in relations if r.holds is False)
        return f"not reproduced: {failed}"
    if any(r.diff.n < 2 for r in relations):
        return "inconclusive: one seed (or a missing value) gives no interval"
    return "inconclusive: " + "; ".join(_undecided(r, pct, unit) for r in relations if r.holds is None)


def _p(p: float | None) -> str:
    return "n/a" if p is None else (f"{p:.3f}" if p >= 0.001 else "<0.001")


def relations_table(relations: list[Relation], pct: bool = True, unit: str = "pts") -> list[str]:
    label = relations[0].diff.label() if relations else ""
    lines = [f"| relation | difference, {unit} [{label}] | margin | p shown | p refuted | verdict | seeds to decide |",
             "|---|---|---|---|---|---|---|"]
    for r in relations:
        state = {True: "shown", False: "**refuted**", None: "inconclusive"}[r.holds]
        d = r.decision
        ps = r.p_shown_adj if r.p_shown_adj is not None else (d and d.p_shown)
        pr = r.p_refuted_adj if r.p_refuted_adj is not None else (d and d.p_refuted)
        need = "-" if r.holds is not None else (r.seeds_to_decide() or "n/a")
        lines.append(f"| {r.a} {r.rel} {r.b} | {r.diff.fmt(pct)} | {_fmt_margin(r.margin, pct, unit)} | {_p(ps)} | "
                     f"{_p(pr)} | {state} | {need} |")
    return lines


@dataclass
class ClaimCheck:
    """One claim judged on one group of runs (a task, a run group)."""
    claim: ClaimConfig
    label: str
    relations: list[Relation]
    pct: bool = True
    unit: str = "pts"


def check_claims(jobs: list[tuple[ClaimConfig, dict[str, dict[str, dict]], bool, str]], confidence: float,
                 n_boot: int) -> tuple[list[ClaimCheck], int]:
    """Judge every (claim, {group label: {pe: {seed: value}}}, pct, unit) and adjust all their relations as
    one family: Holm over the p-values of "shown", and separately over those of "refuted", so neither kind of
    decision is wrong anywhere in the report with probability above 1 - confidence. Returns the checks and
    the family's size (relations with at least two seeds)."""
    checks = []
    for claim, groups, pct, unit in jobs:
        for label, by_pe in groups.items():
            if claim.tasks and label.split()[0] not in claim.tasks:
                continue
            checks.append(ClaimCheck(claim, label, judge(claim, by_pe, confidence, n_boot), pct, unit))
    family = [r for c in checks for r in c.relations if r.decision is not None and r.decision.p_shown is not None]
    for r in family:
        r.family = len(family)
    for attr, src in (("p_shown_adj", "p_shown"), ("p_refuted_adj", "p_refuted")):
        ps = [getattr(r.decision, src) for r in family]
        for r, adj in zip(family, holm([1.0 if p is None else p for p in ps])):
            setattr(r, attr, adj)
    return checks, len(family)


def family_note(size: int, confidence: float) -> str:
    alpha = 1 - confidence
    return (f"Many comparisons: Holm over the {size} relations judged in this report (family-wise error "
            f"{100 * alpha:g}% for \"shown\" and, separately, for \"refuted\"); the p-values printed are adjusted.")


def claims_markdown(checks: list[ClaimCheck], rule: str = "") -> str:
    """`rule`: what judged the verdicts when it is not the fixed test (a sequential boundary), on every verdict line."""
    parts = []
    for claim in dict.fromkeys(c.claim.order for c in checks):
        mine = [c for c in checks if c.claim.order == claim]
        first = mine[0].claim
        head = f"### `{first.order}` on {first.metric}" + (f" ({first.source})" if first.source else "")
        parts += [head, ""]
        for c in mine:
            line = verdict(c.relations, c.pct, c.unit)
            at = f", {rule}" if rule else ""
            parts += [f"**Verdict ({c.label}{at}): {line}**", "", *relations_table(c.relations, c.pct, c.unit), ""]
            if not line.startswith("reproduced") and c.claim.differences:
                parts += [f"Differences from the source's setup: {c.claim.differences}", ""]
    return "\n".join(parts)


def rules_note(confidence: float) -> str:
    pct = f"{100 * confidence:g}%"
    return (f"Each relation is a paired Student t test over seeds at {pct} (`>`: the {pct} t-interval of the "
            "difference lies above 0; `>=`: its lower end lies above -margin; `~`: the "
            f"{100 * (2 * confidence - 1):g}% interval lies inside +-margin, two one-sided tests). A relation neither "
            "shown nor refuted is inconclusive; a claim is reproduced only when every relation is shown.")


CLAIMS_HEADING = "## Published claims, reproduced or not"


def report_section(jobs: list[tuple[ClaimConfig, dict[str, dict[str, dict]], bool, str]], confidence: float,
                   n_boot: int, looks=None) -> list[str]:
    """The claims part of a report, the same for a study and a sweep (their writers differ only in where the
    per-seed values come from, `jobs` as `check_claims` takes them): the heading, the test's rules, the family
    note, then every claim's verdict and relations. `looks`: a sequential study's, a callable that sets each
    relation's p-values to its deciding look's and returns (its note lines, the rule the verdict lines name)."""
    checks, size = check_claims(jobs, confidence, n_boot)
    notes, rule = [rules_note(confidence), "", family_note(size, confidence)], ""
    if looks is not None:
        extra, rule = looks(checks)
        notes += ["", *extra]
    return [CLAIMS_HEADING, "", "\n".join([*notes, "", claims_markdown(checks, rule)]), ""]


def claims_section(claims: list[ClaimConfig], groups: dict[str, dict[str, dict]], confidence: float, n_boot: int,
                   pct: bool = True, unit: str = "pts") -> str:
    """Markdown for every claim x group ({group label: {pe: {seed: value}}}, one group per task), judged as
    one family."""
    checks, size = check_claims([(c, groups, pct, unit) for c in claims], confidence, n_boot)
    return "\n".join([family_note(size, confidence), "", claims_markdown(checks)])
