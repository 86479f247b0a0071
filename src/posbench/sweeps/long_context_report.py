"""The sweep report's long-context section (eval suite `long_context`): effective length per PE as the
headline, multi-key NIAH at 2x the training length against its baselines, and exact match by length per family.

Effective lengths are per run (evaluation/effective_length.py), then mean over seeds with the sweep's
Student t-interval (stats.py); a seed whose effective length is n/a is left out of the mean and counted,
with its reason, beside it. ">=" marks a figure where some seed passed at every tested length.
"""

from __future__ import annotations

from collections import defaultdict

from posbench.evaluation.markdown import md_table as table
from posbench.evaluation.markdown import pct
from posbench.stats import interval
from posbench.sweeps.sweep_spec import Run, SweepConfig

MEAN = "mean of families"


def suite_of(results: dict) -> dict | None:
    return (results or {}).get("suites", {}).get("long_context")


def family_names(runs: list[Run], results: dict[str, dict]) -> list[str]:
    return list(dict.fromkeys(f for r in runs for f in (suite_of(results.get(r.name)) or {}).get("families", {})))


def effective_cell(effs: list[dict], confidence: float, n_boot: int) -> str:
    """`mean [lo, hi]` tokens over the seeds with an effective length, and how many seeds were n/a and why."""
    lengths = [e["length"] for e in effs if e["length"] is not None]
    s = interval(lengths, confidence, n_boot=n_boot)
    open_ended = any((e.get("limit") or "").startswith("passes at every") for e in effs)
    text = "n/a" if s.mean is None else (">= " if open_ended else "") + (
        f"{s.mean:.0f}" if s.n < 2 else f"{s.mean:.0f} [no interval]" if s.lo is None else
        f"{s.mean:.0f} [{s.lo:.0f}, {s.hi:.0f}]")
    reasons = "; ".join(sorted({e["na"] for e in effs if e["length"] is None}))
    if not lengths:
        return f"n/a ({reasons})"
    return text + (f" (n/a in {len(effs) - len(lengths)} of {len(effs)} seeds: {reasons})" if reasons else "")


def headline(sweep: SweepConfig, runs: list[Run], results: dict[str, dict], groups: list[str], pes: list[str]) -> str:
    fams = family_names(runs, results)
    effs: dict[tuple, list] = defaultdict(list)
    for run in runs:
        lc = suite_of(results.get(run.name))
        if lc is None:
            continue
        for f in fams:
            if f in lc["families"]:
                effs[(run.group, run.pe, f)].append(lc["families"][f]["effective"])
        effs[(run.group, run.pe, MEAN)].append(lc["mean"]["effective"])
    rows = [[g, pe, *(effective_cell(effs[(g, pe, f)], sweep.confidence, sweep.n_boot) if effs[(g, pe, f)] else "-"
                      for f in [*fams, MEAN])]
            for g in groups for pe in pes if effs[(g, pe, MEAN)]]
    return table(["runs", "PE", *fams, MEAN], rows)


def multikey_at_2x(sweep: SweepConfig, runs: list[Run], results: dict[str, dict], groups: list[str],
                   pes: list[str]) -> str | None:
    """Multi-key NIAH exact match at twice the training length, against chance/commonest and the question-blind
    pick among the needles (1 / keys); `above` is "yes" when the t-interval lies above that pick, "no" when it
    lies at or below it, "inconclusive" otherwise (at 2 seeds the t-interval is wide: most rows are)."""
    vals, base, guess = defaultdict(list), defaultdict(list), defaultdict(list)
    for run in runs:
        fam = (suite_of(results.get(run.name)) or {}).get("families", {}).get("niah_multikey")
        if fam is None:
            continue
        L = str(2 * run.cfg.model.seq_len)
        if L not in fam["by_length"]:
            continue
        key = (run.group, run.pe)
        vals[key].append(fam["by_length"][L])
        base[key].append(fam["baseline_by_length"].get(L))
        guess[key].append(fam["guess_by_length"].get(L))
    if not vals:
        return None
    rows = []
    for g in groups:
        for pe in pes:
            if (g, pe) not in vals:
                continue
            s = interval(vals[(g, pe)], sweep.confidence, n_boot=sweep.n_boot, bounds=(0.0, 1.0))
            pick = max((x for x in guess[(g, pe)] if x is not None), default=None)
            b = max((x for x in base[(g, pe)] if x is not None), default=None)
            above = ("n/a" if s.mean is None or pick is None else "inconclusive (no interval)" if s.lo is None else
                     "yes" if s.lo > pick else "no" if s.hi <= pick else "inconclusive")
            rows.append([g, pe, s.fmt(True), pct(b), pct(pick), above])
    return table(["runs", "PE", "exact match % at 2x", "baseline (chance / commonest)", "random needle's value",
                  f"above the random needle ({sweep.confidence:.0%} t-interval)"], rows)


def by_length(sweep: SweepConfig, runs: list[Run], results: dict[str, dict], family: str, groups: list[str],
              pes: list[str]) -> str:
    vals: dict[tuple, list] = defaultdict(list)
    lengths: set[int] = set()
    for run in runs:
        fam = (suite_of(results.get(run.name)) or {}).get("families", {}).get(family)
        for L, acc in (fam or {}).get("by_length", {}).items():
            vals[(run.group, run.pe, int(L))].append(acc)
            lengths.add(int(L))
    cols = sorted(lengths)
    rows = [[g, pe, *(interval(vals[(g, pe, L)], sweep.confidence, n_boot=sweep.n_boot,
                               bounds=(0.0, 1.0)).fmt(True)
                      if vals[(g, pe, L)] and None not in vals[(g, pe, L)] else "n/a" for L in cols)]
            for g in groups for pe in pes if any((g, pe, L) in vals for L in cols)]
    return table(["runs", "PE", *map(str, cols)], rows)


def section(sweep: SweepConfig, runs: list[Run], results: dict[str, dict], groups: list[str],
            pes: list[str]) -> list[str]:
    """Markdown lines of the section; none when no run has long_context results."""
    fams = family_names(runs, results)
    if not fams:
        return []
    first = next(suite_of(results[r.name]) for r in runs if suite_of(results.get(r.name)))
    parts = ["## Long-context probes (RULER families, lost in the middle): effective length", "",
             f"Effective length in tokens: the longest tested length whose exact match keeps {first['keep']:.0%} of "
             "the in-distribution score (at the training length) and stays above the baseline (chance or the "
             f"commonest answer); {'zero-shot' if not first['shots'] else str(first['shots']) + '-shot'}. Mean over "
             f"seeds [{sweep.confidence:.0%} t-interval]; `>=`: some seed passed at every tested length.", "",
             headline(sweep, runs, results, groups, pes), ""]
    mk = multikey_at_2x(sweep, runs, results, groups, pes)
    if mk:
        parts += ["### Multi-key NIAH at 2x the training length", "", mk, ""]
    for f in fams:
        parts += [f"### {f}: exact match % by length (mean over depths)", "",
                  by_length(sweep, runs, results, f, groups, pes), ""]
    return parts
