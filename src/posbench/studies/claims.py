"""Published claims checked against our seeds: an ordering of PEs on one metric, decided by paired CIs.

A claim is a chain of PE names (or numbers) joined by relations, as papers state their results:

    order: "none >= t5 > alibi > rope ~ learned"      # Kazemnejad et al. 2023, OOD accuracy
    order: "rope > alibi ~ 0"                         # ppl slope: RoPE rises, ALiBi stays flat

Each adjacent pair is judged on the per-seed values of the metric. Between two PEs the seeds are paired
(same data order, same evaluation examples), so the judge is the percentile-bootstrap CI of the mean
per-seed difference a - b; against a number c it is the CI of a's mean minus c:

    a > b    holds when the whole CI is above 0 (a is better, and the seeds show it)
    a >= b   holds unless the whole CI is below 0 (a is not worse)
    a ~ b    holds when the CI contains 0 (the seeds cannot tell them apart)

The claim is *reproduced* when every relation holds; otherwise the verdict names each failed relation with
its CI. With few seeds the CIs are wide: `~` and `>=` then hold easily and `>` rarely, which is the
honest reading of few seeds, not a bias of the method.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from posbench.config_loader import ConfigError, nearest
from posbench.stats import Summary, bootstrap_ci

RELATIONS = (">=", ">", "~")
_SPLIT = re.compile(r"\s*(>=|>|~)\s*")


@dataclass
class ClaimConfig:
    order: str = ""  # e.g. "none >= t5 > alibi > rope ~ learned"
    metric: str = "ood_beyond_acc"  # which per-seed value is compared
    tasks: list[str] = field(default_factory=list)  # studies: the tasks it is about ([] = every task)
    source: str = ""  # where the claim is published
    differences: str = ""  # how our setup differs from the source's, printed with a failed verdict

    def __post_init__(self):
        parse_order(self.order)

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
    diff: Summary  # CI of a - b (paired over seeds), or of a - constant

    @property
    def holds(self) -> bool | None:
        d = self.diff
        if d.mean is None or d.n < 2:
            return None  # one seed has no interval: nothing to decide
        return {">": d.lo > 0, ">=": d.hi >= 0, "~": d.lo <= 0 <= d.hi}[self.rel]


def _values(term: str, by_pe: dict[str, dict]) -> dict | float:
    return float(term) if _is_number(term) else by_pe.get(term, {})


def judge(claim: ClaimConfig, by_pe: dict[str, dict], confidence: float, n_boot: int) -> list[Relation]:
    """Every relation of the chain on `by_pe` = {pe: {seed: value}}."""
    terms, rels = parse_order(claim.order)
    out = []
    for a, rel, b in zip(terms, rels, terms[1:]):
        va, vb = _values(a, by_pe), _values(b, by_pe)
        if isinstance(va, float):  # constant on the left: flip to keep "PE - constant"
            diffs = [va - x for x in vb.values() if x is not None]
        elif isinstance(vb, float):
            diffs = [x - vb for x in va.values() if x is not None]
        else:
            seeds = sorted(s for s in va if s in vb and va[s] is not None and vb[s] is not None)
            diffs = [va[s] - vb[s] for s in seeds]
        out.append(Relation(a, rel, b, bootstrap_ci(diffs, confidence, n_boot)))
    return out


def verdict(relations: list[Relation], pct: bool = True, unit: str = "pts") -> str:
    """One line: reproduced / not reproduced (naming each failed relation and its CI) / undecided."""
    states = [r.holds for r in relations]
    if any(s is None for s in states):
        return "undecided: one seed (or a missing value) gives no interval"
    if all(states):
        return "reproduced"
    failed = "; ".join(f"`{r.a} {r.rel} {r.b}` fails ({r.a} - {r.b} = {r.diff.fmt(pct)} {unit})"
                       for r in relations if not r.holds)
    return f"not reproduced: {failed}"


def relations_table(relations: list[Relation], pct: bool = True, unit: str = "pts") -> list[str]:
    lines = [f"| relation | difference, {unit} [CI] | seeds | holds |", "|---|---|---|---|"]
    for r in relations:
        holds = "n/a" if r.holds is None else ("yes" if r.holds else "**no**")
        lines.append(f"| {r.a} {r.rel} {r.b} | {r.diff.fmt(pct)} | {r.diff.n} | {holds} |")
    return lines


def claims_section(claims: list[ClaimConfig], groups: dict[str, dict[str, dict]], confidence: float, n_boot: int,
                   pct: bool = True, unit: str = "pts") -> str:
    """Markdown for every claim x group ({group label: {pe: {seed: value}}}, one group per task)."""
    parts = []
    for claim in claims:
        head = f"### `{claim.order}` on {claim.metric}" + (f" ({claim.source})" if claim.source else "")
        parts += [head, ""]
        for label, by_pe in groups.items():
            if claim.tasks and label.split()[0] not in claim.tasks:
                continue
            relations = judge(claim, by_pe, confidence, n_boot)
            line = verdict(relations, pct, unit)
            parts += [f"**Verdict ({label}): {line}**", "", *relations_table(relations, pct, unit), ""]
            if not line.startswith("reproduced") and claim.differences:
                parts += [f"Differences from the source's setup: {claim.differences}", ""]
    return "\n".join(parts)
