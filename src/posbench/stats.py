"""Statistics over seeds: mean, percentile-bootstrap confidence interval, success rate, and paired
comparisons (seeds share data order and evaluation examples across PEs, so differences are paired).

The bootstrap is deterministic (fixed generator), so identical inputs give identical reports. With
few seeds the interval is wide by design: that is the honest statement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Summary:
    n: int
    mean: float | None
    lo: float | None
    hi: float | None

    def fmt(self, pct: bool = True) -> str:
        if self.mean is None:
            return "n/a"
        k = 100 if pct else 1
        if self.n < 2:
            return f"{k * self.mean:.1f}" if pct else f"{self.mean:.3f}"
        return f"{k * self.mean:.1f} [{k * self.lo:.1f}, {k * self.hi:.1f}]" if pct else \
            f"{self.mean:.3f} [{self.lo:.3f}, {self.hi:.3f}]"


def bootstrap_ci(values, confidence: float = 0.95, n_boot: int = 10000, seed: int = 0) -> Summary:
    """Percentile bootstrap of the mean (Efron & Tibshirani 1993, ch. 13); None values are n/a."""
    vals = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if vals.size == 0:
        return Summary(0, None, None, None)
    mean = float(vals.mean())
    if vals.size == 1:
        return Summary(1, mean, mean, mean)
    rng = np.random.default_rng(seed)
    means = vals[rng.integers(0, vals.size, size=(n_boot, vals.size))].mean(axis=1)
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return Summary(int(vals.size), mean, float(lo), float(hi))


def success_rate(values, threshold: float) -> float | None:
    vals = [v for v in values if v is not None]
    return None if not vals else sum(v >= threshold for v in vals) / len(vals)


@dataclass
class Comparison:
    a: str
    b: str
    diff: Summary  # mean of (a - b) over paired seeds

    @property
    def distinguishable(self) -> bool:
        """The CI of the paired difference excludes 0."""
        return self.diff.mean is not None and self.diff.n >= 2 and (self.diff.lo > 0 or self.diff.hi < 0)


def paired(a_by_seed: dict, b_by_seed: dict, a: str, b: str, confidence: float, n_boot: int) -> Comparison:
    seeds = sorted(s for s in a_by_seed if s in b_by_seed and a_by_seed[s] is not None and b_by_seed[s] is not None)
    diffs = [a_by_seed[s] - b_by_seed[s] for s in seeds]
    return Comparison(a, b, bootstrap_ci(diffs, confidence, n_boot))


def seeds_needed(diffs, confidence: float = 0.95) -> int | None:
    """Seeds a paired comparison needs before its interval excludes 0, if the effect stays what these seeds
    show: the smallest n with z * sd / sqrt(n) < |mean| (normal approximation of the paired-difference
    mean; at least 2, since one seed has no interval). None when the observed mean difference is 0: no
    number of seeds separates two PEs that these seeds cannot tell apart on average."""
    vals = np.asarray([d for d in diffs if d is not None], dtype=np.float64)
    if vals.size < 2 or vals.mean() == 0:
        return None
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    sd = float(vals.std(ddof=1))
    return max(2, int(np.ceil((z * sd / abs(float(vals.mean()))) ** 2)))
