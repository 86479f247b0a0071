#!/usr/bin/env python
"""How often do posbench's interval methods call a difference that is not there, miss one that is, or call
two PEs "the same" when they differ by the margin? Simulated per-seed paired differences, every method of
posbench.stats.INTERVALS, seed counts 2-20, five distributions; one table per measure.

    python scripts/calibrate_stats.py                  # 2,000 draws per cell (~1 SE = 0.5% at a 5% rate)
    python scripts/calibrate_stats.py --draws 4000 --json calib.json

Distributions of the per-seed difference a - b (null: no true difference, mean exactly 0):
  normal      N(0, 1)
  skewed      lognormal(0, 0.5) minus its mean (skewness 1.8)
  heavy_skew  lognormal(0, 1) minus its mean (skewness 6.2; one SD up makes every value positive)
  bounded     a, b = per-seed accuracies near 97%: 1.03 x Beta(mean 0.97, 30) clipped at 1, on 256 examples
              (about half the seeds sit at exactly 100%, many differences tie at 0)
  chance_mix  a, b ~ N(90%, 2%), but each run falls to chance (10%) with probability 0.15
A true difference (power, margin) is a shift of the null differences by `sd`, the null's standard deviation
(measured on 400,000 reference draws), so it is one SD in every distribution. The intervals are the very
functions reports call, on the whole batch at once (the rows share resample indices, as a single report
with the same seed would use); a row with no interval (NaN) counts as no call.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from posbench.stats import INTERVALS

SEEDS = (2, 3, 5, 10, 20)
EXAMPLES = 256  # a study's n_examples: accuracies are multiples of 1/256


def _normal(rng, shape):
    return rng.standard_normal(shape)


def _skewed(rng, shape):
    return rng.lognormal(0.0, 0.5, shape) - np.exp(0.125)


def _heavy_skew(rng, shape):
    return rng.lognormal(0.0, 1.0, shape) - np.exp(0.5)


def _bounded_acc(rng, shape):
    mean, conc = 0.97, 30.0
    acc = np.minimum(1.0, 1.03 * rng.beta(mean * conc, (1 - mean) * conc, shape))
    return np.round(acc * EXAMPLES) / EXAMPLES


def _bounded(rng, shape):
    return _bounded_acc(rng, shape) - _bounded_acc(rng, shape)


def _chance_acc(rng, shape):
    acc = 0.9 + 0.02 * rng.standard_normal(shape)
    return np.where(rng.random(shape) < 0.15, 0.1, acc)


def _chance_mix(rng, shape):
    return _chance_acc(rng, shape) - _chance_acc(rng, shape)


DISTRIBUTIONS = {"normal": _normal, "skewed": _skewed, "heavy_skew": _heavy_skew, "bounded": _bounded,
                 "chance_mix": _chance_mix}

MEASURES = {  # name -> (what it counts, the rate a calibrated method should show)
    "fpr": "no true difference: the 95% interval excludes 0 (false positive; nominal 5%)",
    "power": "true difference 1 SD: the 95% interval excludes 0 (power)",
    "same_rule_at_margin": "true difference 1 SD: the 95% interval contains 0, today's `~` (false 'same')",
    "tost_at_margin": "true difference = margin = 1 SD: TOST's 90% interval inside +-margin (false 'same'; "
                      "nominal <= 5%)",
    "tost_at_zero": "no true difference: TOST with margin 1 SD says 'same' (equivalence power)",
}


def simulate(draws: int, n_boot: int, methods: list[str], seed: int = 0) -> dict:
    """{measure: {method: {distribution: {n: rate}}}}; deterministic for a given seed."""
    out = {m: {meth: {d: {} for d in DISTRIBUTIONS} for meth in methods} for m in MEASURES}
    for di, (dist, gen) in enumerate(DISTRIBUTIONS.items()):
        sd = float(gen(np.random.default_rng([seed, di, 0]), 400_000).std())
        for n in SEEDS:
            null = gen(np.random.default_rng([seed, di, n]), (draws, n))
            for meth in methods:
                fn = INTERVALS[meth].fn
                lo, hi = fn(null, 0.95, n_boot, 0)
                out["fpr"][meth][dist][n] = float(np.mean((lo > 0) | (hi < 0)))
                lo, hi = fn(null + sd, 0.95, n_boot, 0)
                out["power"][meth][dist][n] = float(np.mean(lo > 0))
                out["same_rule_at_margin"][meth][dist][n] = float(np.mean((lo <= 0) & (0 <= hi)))
                lo, hi = fn(null + sd, 0.90, n_boot, 0)
                out["tost_at_margin"][meth][dist][n] = float(np.mean((lo > -sd) & (hi < sd)))
                lo, hi = fn(null, 0.90, n_boot, 0)
                out["tost_at_zero"][meth][dist][n] = float(np.mean((lo > -sd) & (hi < sd)))
    return out


def tables(result: dict, draws: int) -> str:
    se5, se50 = (100 * np.sqrt(p * (1 - p) / draws) for p in (0.05, 0.5))
    parts = [f"{draws} draws per cell: one standard error is {se5:.1f}% at a 5% rate, {se50:.1f}% at 50%."]
    for measure, what in MEASURES.items():
        rows = result[measure]
        parts += ["", f"### {measure}: {what}", "",
                  "| method | seeds | " + " | ".join(DISTRIBUTIONS) + " |",
                  "|---|---|" + "---|" * len(DISTRIBUTIONS)]
        for meth, by_dist in rows.items():
            for n in SEEDS:
                cells = " | ".join(f"{100 * by_dist[d][n]:.1f}%" for d in DISTRIBUTIONS)
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
    args = p.parse_args(argv)
    if args.draws < 1 or args.n_boot < 1:
        p.error("--draws and --n-boot must be positive")
    start = time.perf_counter()
    result = simulate(args.draws, args.n_boot, args.methods, args.seed)
    took = time.perf_counter() - start
    payload = {"draws": args.draws, "n_boot": args.n_boot, "seed": args.seed, "seconds": round(took, 1),
               "min_seeds": {m: INTERVALS[m].min_seeds for m in args.methods},
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
