#!/usr/bin/env python
"""How often do posbench's judges call a difference that is not there, miss one that is, or call two PEs "the
same" when they differ by the margin? Simulated per-seed values of two (or five) PEs, every interval method of
posbench.stats.INTERVALS and the judges built on the default one, seed counts 2-20; one table per measure.

    python scripts/calibrate_stats.py                  # 2,000 draws per cell (~1 SE = 0.5% at a 5% rate)
    python scripts/calibrate_stats.py --draws 4000 --json calib.json
    python scripts/calibrate_stats.py --sequential 3:10:1 --draws 4000   # the sequential rule against fixed n

Per-seed values of one PE, drawn independently for each PE (with no true difference the PEs are exchangeable,
so the paired differences a - b are symmetric about 0, whatever the values' shape):
  normal       N(0, 1)
  skewed       lognormal(0, 0.5) (skewness 1.8: a loss or a perplexity)
  heavy_skew   lognormal(0, 1) (skewness 6.2)
  bounded_100  accuracies near 97% with a ceiling: 1.03 x Beta(mean 0.97, 30) clipped at 1, on 256 examples
               (about half the seeds at exactly 100%, many differences tie at 0)
  bounded_0    accuracies near 3% with a floor at 0% (the mirror image)
  chance_mix   N(90%, 2%), but each run falls to chance (10%) with probability 0.15
  shape_stress a stress test outside exchangeability: a from skewed, b normal with the same mean and SD (equal
               means, different shapes, so a - b is skewed under the null)
A true difference (power, margins) is a shift of a by `sd`, the standard deviation of the null difference a - b
(measured on 400,000 reference draws), so it is one SD in every distribution. Intervals are the very functions
reports call, on the whole batch at once; a row with no interval (NaN) counts as no call.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from scipy import stats as sps

from posbench.stats import DEFAULT_METHOD, INTERVALS
from posbench.stats_sequential import SPENDING, Boundary
from posbench.studies.sequential import parse_sequential

SEEDS = (2, 3, 5, 10, 20)
EXAMPLES = 256  # a study's n_examples: accuracies are multiples of 1/256
PES = 5  # the pair table's family: 5 PEs, 10 pairs, as the quickstart


def _bounded_acc(rng, shape):
    mean, conc = 0.97, 30.0
    acc = np.minimum(1.0, 1.03 * rng.beta(mean * conc, (1 - mean) * conc, shape))
    return np.round(acc * EXAMPLES) / EXAMPLES


def _chance_acc(rng, shape):
    acc = 0.9 + 0.02 * rng.standard_normal(shape)
    return np.where(rng.random(shape) < 0.15, 0.1, acc)


def _skewed(rng, shape):
    return rng.lognormal(0.0, 0.5, shape)


# name -> (values of PE a, values of PE b); b is a's generator unless the PEs differ in shape
VALUES = {
    "normal": (lambda rng, s: rng.standard_normal(s),) * 2,
    "skewed": (_skewed,) * 2,
    "heavy_skew": (lambda rng, s: rng.lognormal(0.0, 1.0, s),) * 2,
    "bounded_100": (_bounded_acc,) * 2,
    "bounded_0": (lambda rng, s: 1.0 - _bounded_acc(rng, s),) * 2,
    "chance_mix": (_chance_acc,) * 2,
    # same mean exp(0.125) and SD as the skewed values, normal shape
    "shape_stress": (_skewed, lambda rng, s: np.exp(0.125) + np.sqrt((np.exp(0.25) - 1) * np.exp(0.25))
                     * rng.standard_normal(s)),
}

MEASURES = {  # name -> what it counts
    "fpr": "no true difference: the 95% interval of a - b excludes 0 (false positive; nominal 5%)",
    "power": "true difference 1 SD: the 95% interval lies above 0 (power)",
    "old_same_rule": "true difference 1 SD: the 95% interval contains 0, the old `~` (false 'same')",
    "tost_at_margin": "true difference = margin = 1 SD: `~` shown, TOST's 90% interval inside +-margin (false "
                      "'same'; nominal <= 5%)",
    "noninf_at_margin": "true difference = -margin = -1 SD: `>=` shown, the 95% interval's lower end above "
                        "-margin (false 'no worse'; nominal <= 2.5%)",
    "tost_at_zero": "no true difference: `~` shown with margin 1 SD (equivalence power)",
}
FAMILY = {  # the pair table (default method only): 5 exchangeable PEs, 10 pairs
    "pairs_unadjusted": f"no true difference among {PES} PEs: some pair of the {PES * (PES - 1) // 2} called "
                        "different, each pair at 5% (family-wise error without adjustment)",
    "pairs_holm": f"no true difference among {PES} PEs: some pair called different after Holm over the "
                  f"{PES * (PES - 1) // 2} pairs (family-wise error; nominal <= 5%)",
}


def _pvalues(d: np.ndarray) -> np.ndarray:
    """Two-sided one-sample t test p-values of rows of d, as posbench.stats.t_test_pvalue computes them."""
    n = d.shape[-1]
    m, sd = d.mean(axis=-1), d.std(axis=-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = m / (sd / np.sqrt(n))
    p = 2 * sps.t.sf(np.abs(t), n - 1)
    zero = sd <= 1e-12 * np.maximum(1.0, np.abs(d).max(axis=-1))  # as stats._t_stats: no spread -> sign-flip test
    return np.where(zero, np.where(m == 0, 1.0, 0.5 ** (n - 1)), p)


def _holm_any(p: np.ndarray, alpha: float) -> np.ndarray:
    """Per row of p (draws, m): does Holm reject anything? (its smallest p times m below alpha)."""
    return np.sort(p, axis=1)[:, 0] * p.shape[1] < alpha


def simulate(draws: int, n_boot: int, methods: list[str], seed: int = 0) -> dict:
    """{measure: {method: {distribution: {n: rate}}}}; deterministic for a given seed."""
    out = {m: {meth: {d: {} for d in VALUES} for meth in methods} for m in MEASURES}
    out.update({m: {DEFAULT_METHOD: {d: {} for d in VALUES}} for m in FAMILY})
    for di, (dist, (gen_a, gen_b)) in enumerate(VALUES.items()):
        ref = np.random.default_rng([seed, di, 0])
        sd = float((gen_a(ref, 400_000) - gen_b(ref, 400_000)).std())
        for n in SEEDS:
            rng = np.random.default_rng([seed, di, n])
            null = gen_a(rng, (draws, n)) - gen_b(rng, (draws, n))
            for meth in methods:
                fn = INTERVALS[meth].fn
                lo, hi = fn(null, 0.95, n_boot, 0)
                out["fpr"][meth][dist][n] = float(np.mean((lo > 0) | (hi < 0)))
                lo, hi = fn(null + sd, 0.95, n_boot, 0)
                out["power"][meth][dist][n] = float(np.mean(lo > 0))
                out["old_same_rule"][meth][dist][n] = float(np.mean((lo <= 0) & (0 <= hi)))
                lo, hi = fn(null - sd, 0.95, n_boot, 0)
                out["noninf_at_margin"][meth][dist][n] = float(np.mean(lo > -sd))
                lo, hi = fn(null + sd, 0.90, n_boot, 0)
                out["tost_at_margin"][meth][dist][n] = float(np.mean((lo > -sd) & (hi < sd)))
                lo, hi = fn(null, 0.90, n_boot, 0)
                out["tost_at_zero"][meth][dist][n] = float(np.mean((lo > -sd) & (hi < sd)))
            values = np.stack([gen_a(rng, (draws, n)) for _ in range(PES)], axis=1)  # (draws, PEs, n)
            i, j = np.triu_indices(PES, 1)
            p = _pvalues(values[:, i] - values[:, j])  # (draws, pairs)
            if n < INTERVALS[DEFAULT_METHOD].min_seeds:  # no interval, no call (as stats.decide)
                p = np.ones_like(p)
            out["pairs_unadjusted"][DEFAULT_METHOD][dist][n] = float(np.mean((p < 0.05).any(axis=1)))
            out["pairs_holm"][DEFAULT_METHOD][dist][n] = float(np.mean(_holm_any(p, 0.05)))
    return out


def _p_above(d: np.ndarray, bound) -> np.ndarray:
    """One-sided t test p of "the mean of each row of d is above `bound`", as posbench.stats.p_above (no spread:
    the sign-flip test's 2^-n when every value lies above the bound)."""
    n = d.shape[-1]
    m, sd = d.mean(axis=-1), d.std(axis=-1, ddof=1)
    zero = sd <= 1e-12 * np.maximum(1.0, np.abs(d).max(axis=-1))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = sps.t.sf((m - bound) / (sd / np.sqrt(n)), n - 1)
    return np.where(zero, np.where(m > bound, 0.5 ** n, 1.0), p)


def _looks(d: np.ndarray, looks: tuple, margin: float, level) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One pair judged at each look of `looks` on the draws' differences d (draws, max): "they differ" (two-sided t)
    first, then "the same within +-margin" (TOST), as studies/sequential.py does; a draw stops at its first verdict.
    `level(k)` -> (two-sided, one-sided) nominal levels of look k. Returns per draw: differs (+1 above, -1 below,
    0 not), same (bool), seeds used."""
    differ, same = np.zeros(len(d), int), np.zeros(len(d), bool)
    used = np.full(len(d), looks[-1])
    alive = np.ones(len(d), bool)
    for k, n in enumerate(looks):
        x = d[:, :n]
        up, down = _p_above(x, 0.0), _p_above(-x, 0.0)
        p_two = np.minimum(1.0, 2 * np.minimum(up, down))
        p_same = np.maximum(_p_above(x, -margin), _p_above(-x, -margin))
        two, one = level(k)
        hit = alive & (p_two < two)
        differ[hit] = np.where(up[hit] < down[hit], 1, -1)
        eq = alive & ~hit & (p_same < one)
        same |= eq
        stop = hit | eq
        used[stop] = n
        alive &= ~stop
    return differ, same, used


def _holm_adjust(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values per row of p (draws, m), as posbench.stats.holm."""
    m = p.shape[1]
    order = np.argsort(p, axis=1, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate(np.take_along_axis(p, order, 1) * (m - np.arange(m)), axis=1))
    out = np.empty_like(adj)
    np.put_along_axis(out, order, adj, 1)
    return out


def _family_looks(values: np.ndarray, looks: tuple, margin: float, level) -> tuple[np.ndarray, np.ndarray]:
    """The pair table of studies/sequential.py on PES exchangeable rows (values: draws, PES, max): at each look every
    pair's t tests on the seeds both rows have, Holm over the 10 pairs, an undecided pair decided at the look's level;
    a row stops when all its pairs are decided. Returns (some pair called different, mean seeds per row)."""
    i, j = np.triu_indices(PES, 1)
    d = values[:, i] - values[:, j]  # (draws, pairs, max)
    p_two, p_same = [], []
    for n in looks:
        x = d[..., :n]
        up, down = _p_above(x, 0.0), _p_above(-x, 0.0)
        p_two.append(np.minimum(1.0, 2 * np.minimum(up, down)))
        p_same.append(np.maximum(_p_above(x, -margin), _p_above(-x, -margin)))
    p_two, p_same = np.stack(p_two, -1), np.stack(p_same, -1)  # (draws, pairs, looks)
    draws = len(values)
    stop = np.full((draws, PES), len(looks) - 1)  # the look each row stopped at
    running = np.ones((draws, PES), bool)
    decided, differs = np.zeros((draws, len(i)), bool), np.zeros(draws, bool)
    for k in range(len(looks)):
        at = np.minimum(np.where(running[:, i], k, stop[:, i]), np.where(running[:, j], k, stop[:, j]))
        pd = _holm_adjust(np.take_along_axis(p_two, at[..., None], -1)[..., 0])
        ps = _holm_adjust(np.take_along_axis(p_same, at[..., None], -1)[..., 0])
        two, one = level(k)
        hit = ~decided & (pd < two)
        differs |= hit.any(axis=1)
        decided |= hit | (ps < one)
        for r in range(PES):  # a row stops when every pair it is in is decided
            mine = (i == r) | (j == r)
            done = running[:, r] & decided[:, mine].all(axis=1)
            stop[done, r] = k
            running[done, r] = False
    return differs, np.asarray(looks)[stop].mean(axis=1)


SEQ_MEASURES = {  # name -> (true difference in SDs, what is counted, nominal)
    "false_differs": (0.0, "no true difference: called different at some look (nominal 5%)"),
    "false_same": (1.0, "true difference = margin = 1 SD: called the same (nominal <= 5%)"),
    "power": (1.0, "true difference 1 SD: shown above (power)"),
    "power_same": (0.0, "no true difference: shown the same within 1 SD (equivalence power)"),
}


def simulate_sequential(draws: int, looks: tuple, seed: int = 0, dists=tuple(VALUES), family: bool = True) -> dict:
    """{rule: {measure: {distribution: rate}}} for the sequential rule under each spending, the naive rule (every
    look at the fixed level, stop at the first verdict: optional stopping), and fixed n at the sequential rule's
    mean seeds used under the 1-SD difference (equal expected cost, rounded to whole seeds) and at `max`;
    `mean_seeds_*` per scenario. `dists`: which of VALUES (a test runs a few); `family`: also the five-PE pair
    table (`pairs_holm_*`)."""
    out: dict = {}
    fixed = lambda k: (0.05, 0.05)  # noqa: E731  the fixed test's levels at every look
    rules = {f"sequential_{name}": Boundary(looks, 0.95, name) for name in SPENDING}
    for di, (dist, (gen_a, gen_b)) in enumerate(VALUES.items()):
        if dist not in dists:
            continue
        ref = np.random.default_rng([seed, di, 0])
        sd = float((gen_a(ref, 400_000) - gen_b(ref, 400_000)).std())
        rng = np.random.default_rng([seed, di, 99])
        null = gen_a(rng, (draws, looks[-1])) - gen_b(rng, (draws, looks[-1]))
        cases = {0.0: null, 1.0: null + sd}
        judged = {name: (lambda k, b=b: (b.two_sided(k), b.one_sided(k))) for name, b in rules.items()}
        judged["naive_every_look"] = fixed
        table = np.stack([gen_a(rng, (draws, looks[-1])) for _ in range(PES)], axis=1)  # (draws, PES, max)
        for name, level in judged.items():
            res = {shift: _looks(d, looks, sd, level) for shift, d in cases.items()}
            row = out.setdefault(name, {})
            if family:
                differs, seeds = _family_looks(table, looks, sd, level)
                row.setdefault("pairs_holm_false_differs", {})[dist] = float(np.mean(differs))
                row.setdefault("pairs_holm_mean_seeds", {})[dist] = float(np.mean(seeds))
            row.setdefault("false_differs", {})[dist] = float(np.mean(res[0.0][0] != 0))
            row.setdefault("false_same", {})[dist] = float(np.mean(res[1.0][1]))
            row.setdefault("power", {})[dist] = float(np.mean(res[1.0][0] == 1))
            row.setdefault("power_same", {})[dist] = float(np.mean(res[0.0][1]))
            row.setdefault("mean_seeds_null", {})[dist] = float(np.mean(res[0.0][2]))
            row.setdefault("mean_seeds_1sd", {})[dist] = float(np.mean(res[1.0][2]))
        for name in rules:  # fixed n at the sequential rule's expected cost under the 1-SD difference
            n = max(looks[0], int(round(out[name]["mean_seeds_1sd"][dist])))
            res = {shift: _looks(d, (n,), sd, fixed) for shift, d in cases.items()}
            row = out.setdefault(f"fixed_at_cost_of_{name}", {})
            row.setdefault("seeds", {})[dist] = n
            row.setdefault("false_differs", {})[dist] = float(np.mean(res[0.0][0] != 0))
            row.setdefault("false_same", {})[dist] = float(np.mean(res[1.0][1]))
            row.setdefault("power", {})[dist] = float(np.mean(res[1.0][0] == 1))
            row.setdefault("power_same", {})[dist] = float(np.mean(res[0.0][1]))
        res = {shift: _looks(d, (looks[-1],), sd, fixed) for shift, d in cases.items()}
        row = out.setdefault(f"fixed_{looks[-1]}", {})
        if family:
            row.setdefault("pairs_holm_false_differs", {})[dist] = float(np.mean(
                _family_looks(table, (looks[-1],), sd, fixed)[0]))
        row.setdefault("false_differs", {})[dist] = float(np.mean(res[0.0][0] != 0))
        row.setdefault("false_same", {})[dist] = float(np.mean(res[1.0][1]))
        row.setdefault("power", {})[dist] = float(np.mean(res[1.0][0] == 1))
        row.setdefault("power_same", {})[dist] = float(np.mean(res[0.0][1]))
    return out


def sequential_tables(result: dict, draws: int, looks: tuple) -> str:
    se5 = 100 * np.sqrt(0.05 * 0.95 / draws)
    parts = [f"Sequential seeds, looks at {', '.join(map(str, looks))} seeds; {draws} draws per cell: one standard "
             f"error is {se5:.1f}% at a 5% rate. Margin 1 SD of the null difference.", "",
             "| rule | measure | " + " | ".join(VALUES) + " |", "|---|---|" + "---|" * len(VALUES)]
    for rule, measures in result.items():
        for measure, by_dist in measures.items():
            fmt = (lambda v: f"{v:.2f}") if "mean_seeds" in measure or measure == "seeds" else \
                (lambda v: f"{100 * v:.1f}%")
            parts.append(f"| {rule} | {measure} | " + " | ".join(fmt(by_dist[d]) for d in by_dist) + " |")
    return "\n".join(parts)


def tables(result: dict, draws: int) -> str:
    se5, se50 = (100 * np.sqrt(p * (1 - p) / draws) for p in (0.05, 0.5))
    parts = [f"{draws} draws per cell: one standard error is {se5:.1f}% at a 5% rate, {se50:.1f}% at 50%."]
    for measure, what in {**MEASURES, **FAMILY}.items():
        rows = result[measure]
        parts += ["", f"### {measure}: {what}", "",
                  "| method | seeds | " + " | ".join(VALUES) + " |",
                  "|---|---|" + "---|" * len(VALUES)]
        for meth, by_dist in rows.items():
            for n in SEEDS:
                cells = " | ".join(f"{100 * by_dist[d][n]:.1f}%" for d in VALUES)
                below = " (no interval)" if n < INTERVALS[meth].min_seeds else ""
                parts.append(f"| {meth} | {n}{below} | {cells} |")
    return "\n".join(parts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--draws", type=int, default=2000, help="simulated studies per cell (default 2000)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples per interval (default 2000)")
    p.add_argument("--methods", nargs="+", default=list(INTERVALS), choices=list(INTERVALS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="also write the rates as JSON ('-' = stdout, no tables)")
    p.add_argument("--sequential", metavar="START:MAX[:STEP]",
                   help="measure the sequential rule (studies/sequential.py) with these looks instead, against the "
                        "naive rule and fixed n at equal expected cost, on the same distributions")
    args = p.parse_args(argv)
    if args.draws < 1 or args.n_boot < 1:
        p.error("--draws and --n-boot must be positive")
    start = time.perf_counter()
    if args.sequential:
        try:
            looks = parse_sequential(args.sequential).looks
        except Exception as e:  # a ConfigError: the form is wrong
            p.error(str(e))
        result = simulate_sequential(args.draws, looks, args.seed)
        took = time.perf_counter() - start
        if args.json == "-":
            json.dump({"draws": args.draws, "looks": looks, "seconds": round(took, 1), "rates": result}, sys.stdout,
                      indent=1)
            return 0
        print(sequential_tables(result, args.draws, looks))
        print(f"\n{took:.0f} s ({args.draws} draws)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"draws": args.draws, "looks": looks, "seconds": round(took, 1), "rates": result}, f,
                          indent=1)
        return 0
    result = simulate(args.draws, args.n_boot, args.methods, args.seed)
    took = time.perf_counter() - start
    payload = {"draws": args.draws, "n_boot": args.n_boot, "seed": args.seed, "seconds": round(took, 1),
               "default_method": DEFAULT_METHOD, "min_seeds": {m: INTERVALS[m].min_seeds for m in args.methods},
               "rates": {k: {m: {d: {str(n): r for n, r in v.items()} for d, v in by.items()}
                             for m, by in rows.items()} for k, rows in result.items()}}
    if args.json == "-":
        json.dump(payload, sys.stdout, indent=1)
        return 0
    print(tables(result, args.draws))
    print(f"\n{took:.0f} s ({args.draws} draws, {args.n_boot} resamples)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
