"""Statistics over seeds: mean, confidence intervals, success rate, and paired comparisons (seeds share
data order and evaluation examples across PEs, so differences are paired).

Intervals for the mean come from `INTERVALS`, a registry of methods; every one is deterministic (fixed
generator), so identical inputs give identical reports. `bootstrap_ci` and `paired` default to the
percentile bootstrap, which under-covers with few seeds (docs/statistics.md measures by how much and
recommends the switch); equivalence, non-inferiority and multiple-comparison adjustments live here too.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps


@dataclass
class Summary:
    n: int
    mean: float | None
    lo: float | None  # None with n >= 2: the method gives no interval at this many seeds
    hi: float | None

    def fmt(self, pct: bool = True) -> str:
        if self.mean is None:
            return "n/a"
        k = 100 if pct else 1
        point = f"{k * self.mean:.1f}" if pct else f"{self.mean:.3f}"
        if self.n < 2:
            return point
        if self.lo is None:
            return f"{point} [no interval]"
        return f"{k * self.mean:.1f} [{k * self.lo:.1f}, {k * self.hi:.1f}]" if pct else \
            f"{self.mean:.3f} [{self.lo:.3f}, {self.hi:.3f}]"


# ---- interval methods for a mean -----------------------------------------------------------------------
# Each takes a batch `x` of shape (draws, n) and returns (lo, hi) arrays of shape (draws,): the calibration
# script (scripts/calibrate_stats.py) runs thousands of simulated draws through the very code reports use.
# NaN bounds mean "no interval" for that row.

def _percentile_bootstrap(x, confidence, n_boot, seed):
    # Efron & Tibshirani 1993, ch. 13. One set of resample indices for every row, drawn exactly as before
    # the registry existed, so a single row gives the same numbers to the bit.
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.shape[1], size=(n_boot, x.shape[1]))
    alpha = (1 - confidence) / 2
    lo, hi = np.empty(len(x)), np.empty(len(x))
    for s in _chunks(x, n_boot):  # bounds memory: rows x n_boot x n gathered values per chunk
        lo[s], hi[s] = np.quantile(x[s][:, idx].mean(axis=2), [alpha, 1 - alpha], axis=1)
    return lo, hi


def _t_interval(x, confidence, n_boot, seed):
    # mean +- t_{(1+c)/2, n-1} * s / sqrt(n): exact for normal differences, any n >= 2
    n = x.shape[1]
    half = sps.t.ppf(0.5 + confidence / 2, n - 1) * x.std(axis=1, ddof=1) / np.sqrt(n)
    m = x.mean(axis=1)
    return m - half, m + half


def _bca_bootstrap(x, confidence, n_boot, seed):
    # Efron 1987 bias-corrected and accelerated percentile interval, as scipy computes it
    with warnings.catch_warnings():  # constant rows are degenerate: NaN, settled below
        warnings.simplefilter("ignore")
        ci = sps.bootstrap((x,), np.mean, axis=1, vectorized=True, method="BCa", n_resamples=n_boot,
                           confidence_level=confidence, batch=max(1, 2_000_000 // (len(x) * x.shape[1])),
                           rng=np.random.default_rng(seed)).confidence_interval
    return _constant_rows(x, np.asarray(ci.low, float), np.asarray(ci.high, float))


def _studentized_bootstrap(x, confidence, n_boot, seed):
    # bootstrap-t (Efron & Tibshirani 1993, ch. 12.5): quantiles of (mean* - mean) / se* replace the
    # t table. A resample of one repeated value has se* = 0 and no t*: it is left out (NaN).
    n = x.shape[1]
    rng = np.random.default_rng(seed)
    counts = np.zeros((n_boot, n))  # resample weights: how often each seed is drawn, over n
    np.add.at(counts, (np.arange(n_boot)[:, None], rng.integers(0, n, size=(n_boot, n))), 1 / n)
    m, se = x.mean(axis=1), x.std(axis=1, ddof=1) / np.sqrt(n)
    bm = x @ counts.T  # resample means, (draws, n_boot)
    bvar = np.maximum((x * x) @ counts.T - bm * bm, 0) * n / (n - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        tstar = (bm - m[:, None]) / np.sqrt(bvar / n)
    tstar[bvar <= 1e-12 * (x * x).mean(axis=1, keepdims=True)] = np.nan  # rounding-level variance is none
    alpha = (1 - confidence) / 2
    with warnings.catch_warnings():  # a row whose every resample has se* = 0 gets NaN: no interval
        warnings.simplefilter("ignore", RuntimeWarning)
        q_lo, q_hi = np.nanquantile(tstar, [alpha, 1 - alpha], axis=1)
    return _constant_rows(x, m - q_hi * se, m - q_lo * se)


def _chunks(x, n_boot, budget=4_000_000):
    step = max(1, budget // (n_boot * max(1, x.shape[1])))
    return [slice(i, i + step) for i in range(0, len(x), step)]


def _constant_rows(x, lo, hi):
    # identical values have no spread to resample: the interval is the point, as the percentile gives
    const = np.ptp(x, axis=1) == 0
    lo, hi = lo.copy(), hi.copy()
    lo[const] = hi[const] = x[const].mean(axis=1)
    return lo, hi


@dataclass(frozen=True)
class IntervalMethod:
    fn: Callable  # (x (draws, n), confidence, n_boot, seed) -> (lo, hi)
    min_seeds: int  # below this the calibration shows no useful coverage: "no interval"


# min_seeds from the calibration in docs/statistics.md (scripts/calibrate_stats.py): at two seeds the
# BCa interval is the percentile one (49% false positives on normal differences); the bootstrap-t's only
# usable resamples at two seeds have t* = 0 (the interval is the point), and it has 20% at three. The
# percentile bootstrap keeps today's 2 so that default reports do not change in this step, although it
# holds 5% at no n <= 20.
INTERVALS: dict[str, IntervalMethod] = {
    "percentile_bootstrap": IntervalMethod(_percentile_bootstrap, 2),
    "t_interval": IntervalMethod(_t_interval, 2),  # exact for normal differences from n = 2 on
    "bca_bootstrap": IntervalMethod(_bca_bootstrap, 3),
    "studentized_bootstrap": IntervalMethod(_studentized_bootstrap, 5),
}


def interval(values, confidence: float = 0.95, method: str = "percentile_bootstrap", n_boot: int = 10000,
             seed: int = 0) -> Summary:
    """Mean of `values` (None = n/a) with `method`'s interval; lo = hi = None below its minimum seeds."""
    spec = INTERVALS[method]
    vals = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if vals.size == 0:
        return Summary(0, None, None, None)
    mean = float(vals.mean())
    if vals.size == 1:
        return Summary(1, mean, mean, mean)
    if vals.size < spec.min_seeds:
        return Summary(int(vals.size), mean, None, None)
    lo, hi = spec.fn(vals[None, :], confidence, n_boot, seed)
    if np.isnan(lo[0]) or np.isnan(hi[0]):
        return Summary(int(vals.size), mean, None, None)
    return Summary(int(vals.size), mean, float(lo[0]), float(hi[0]))


def bootstrap_ci(values, confidence: float = 0.95, n_boot: int = 10000, seed: int = 0) -> Summary:
    """Percentile bootstrap of the mean (Efron & Tibshirani 1993, ch. 13); None values are n/a."""
    return interval(values, confidence, "percentile_bootstrap", n_boot, seed)


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
        """The CI of the paired difference excludes 0 (no interval: not shown to differ)."""
        d = self.diff
        return d.mean is not None and d.n >= 2 and d.lo is not None and (d.lo > 0 or d.hi < 0)


def paired(a_by_seed: dict, b_by_seed: dict, a: str, b: str, confidence: float, n_boot: int,
           method: str = "percentile_bootstrap") -> Comparison:
    seeds = sorted(s for s in a_by_seed if s in b_by_seed and a_by_seed[s] is not None and b_by_seed[s] is not None)
    diffs = [a_by_seed[s] - b_by_seed[s] for s in seeds]
    return Comparison(a, b, interval(diffs, confidence, method, n_boot))


# ---- decisions with a margin ---------------------------------------------------------------------------
# A CI that contains 0 says "not shown to differ", not "the same": with few seeds it contains 0 for
# differences far larger than anyone would call equal. Equivalence needs a margin and an interval inside it.

def equivalent(diffs, margin: float, alpha: float = 0.05, method: str = "t_interval", n_boot: int = 10000,
               seed: int = 0) -> bool | None:
    """TOST (Schuirmann 1987): both one-sided tests at `alpha` reject, i.e. the 1 - 2 alpha interval lies
    inside (-margin, margin). None when there is no interval."""
    s = interval(diffs, 1 - 2 * alpha, method, n_boot, seed)
    return None if s.lo is None or s.n < 2 else bool(-margin < s.lo and s.hi < margin)


def non_inferior(diffs, margin: float, alpha: float = 0.025, method: str = "t_interval", n_boot: int = 10000,
                 seed: int = 0) -> bool | None:
    """a - b is not worse than -margin: the one-sided lower bound at `alpha` (the lower end of the two-sided
    1 - 2 alpha interval, 95% by default as the ICH E9 convention) is above -margin. None without interval."""
    s = interval(diffs, 1 - 2 * alpha, method, n_boot, seed)
    return None if s.lo is None or s.n < 2 else bool(s.lo > -margin)


def t_test_pvalue(diffs) -> float | None:
    """Two-sided one-sample t test of mean(diffs) = 0: the p-value the adjustments below take."""
    vals = np.asarray([d for d in diffs if d is not None], dtype=np.float64)
    if vals.size < 2:
        return None
    if np.ptp(vals) == 0:
        return 1.0 if vals[0] == 0 else 0.0
    return float(sps.ttest_1samp(vals, 0.0).pvalue)


# ---- multiple comparisons --------------------------------------------------------------------------------

def holm(pvalues) -> list[float]:
    """Holm 1979 step-down adjusted p-values (family-wise error): the i-th smallest of m is multiplied by
    m - i + 1 (i from 1), kept non-decreasing in that order and capped at 1; returned in input order."""
    p = np.asarray(pvalues, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out = np.empty(m)
    out[order] = adj
    return out.tolist()


def benjamini_hochberg(pvalues) -> list[float]:
    """Benjamini-Hochberg 1995 adjusted p-values (false discovery rate), as scipy computes them."""
    p = np.asarray(pvalues, dtype=np.float64)
    return sps.false_discovery_control(p, method="bh").tolist() if p.size else []


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
