"""Statistics over seeds: mean, confidence intervals, success rate, paired comparisons (seeds share data
order and evaluation examples across PEs, so differences are paired) and the decisions posbench's judges
make from them.

Every interval and decision reports use is Student's t over seeds (`DEFAULT_METHOD`): it is the one
method in `INTERVALS` that holds its nominal coverage at every seed count posbench uses, measured by
scripts/calibrate_stats.py (docs/statistics.md). Under "the PE makes no difference" two PEs' per-seed values
are exchangeable, so their paired differences are symmetric about 0, where the t test is exact for normal
values and conservative at the usual levels for any other symmetric shape (Efron 1969). The bootstraps stay in
the registry for comparison; each method is deterministic (fixed generator), so identical inputs give identical
reports.

Decisions are three-valued: shown, refuted, or neither ("inconclusive"). `decide()` turns a relation
(`>`, `>=` with a margin, `~` within a margin) into p-values for "shown" and for "refuted"; tables of many
decisions adjust them with Holm (family-wise error) or Benjamini-Hochberg (false discovery rate).

A value is None (n/a) or a finite real number: `value_problem` is the one rule, which every reader of results
applies where it reads them (studies/cell_result.py for cells) and every function here applies to what it is given,
so a NaN, an infinity or a string is refused (DataError), never turned into an interval or a p-value.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from posbench.errors import DataError, brief

DEFAULT_METHOD = "t_interval"


def value_problem(value) -> str | None:
    """Why `value` is not a result value (None = n/a, or a finite real number; a bool is not one), or None when
    it is one: "nan, not a finite number", "'0.5', not a number"."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return f"{brief(value, 40)}, not a number"
    if not math.isfinite(value):
        return f"{float(value)}, not a finite number"
    return None


def checked(values, what: str = "a per-seed value") -> list:
    """`values` as a list, each checked by `value_problem`: DataError at the first that is not None or a finite
    number (NaN differences would otherwise read as p = 1, a NaN mean as "no interval")."""
    out = list(values)
    for v in out:
        problem = value_problem(v)
        if problem is not None:
            raise DataError(f"{what} is {problem}: a result that is not a finite number is refused, not judged; "
                            "find the run or cell that gave it and run it again")
    return out

@dataclass
class Summary:
    n: int
    mean: float | None
    lo: float | None  # None: the method gives no interval at this many seeds (one seed never has one)
    hi: float | None
    method: str = ""  # the INTERVALS key that made lo/hi ("" when built by hand)
    confidence: float | None = None

    def band(self) -> tuple[float | None, float | None]:
        """(lo, hi) to draw: the mean itself where there is no interval (one seed, or below the method's
        minimum), so a plot draws the point without a band rather than a made-up one."""
        return (self.mean, self.mean) if self.lo is None else (self.lo, self.hi)

    def label(self) -> str:
        """What the interval is, as a report prints it: "95% t-interval over 3 seeds"."""
        return interval_label(self.method, self.confidence, self.n)

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
    # Efron & Tibshirani 1993, ch. 13. One set of resample indices for every row, drawn from `seed`, so a row's
    # interval is reproducible to the bit.
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
    name: str  # as reports print it


# min_seeds from the calibration in docs/statistics.md (scripts/calibrate_stats.py): at two seeds the
# BCa interval is the percentile one (49% false positives on normal differences); the bootstrap-t's only
# usable resamples at two seeds have t* = 0 (the interval is the point), and it has 20% at three. The t
# interval is exact for normal values from 2 seeds on, but at 2 seeds it calls 6% of null pairs different
# when runs sometimes collapse to chance (10% of a 5-PE table after Holm), and finds a true 1-SD difference
# 10% of the time: from 3 seeds it holds on every simulated case. The percentile bootstrap holds 5% at no
# n <= 20; it prints from 2 seeds (it is not a default).
INTERVALS: dict[str, IntervalMethod] = {
    "percentile_bootstrap": IntervalMethod(_percentile_bootstrap, 2, "percentile bootstrap"),
    "t_interval": IntervalMethod(_t_interval, 3, "t-interval"),
    "bca_bootstrap": IntervalMethod(_bca_bootstrap, 3, "BCa bootstrap"),
    "studentized_bootstrap": IntervalMethod(_studentized_bootstrap, 5, "bootstrap-t"),
}


def interval_label(method: str, confidence: float | None, n: int) -> str:
    """ "95% t-interval over 3 seeds"; a method or confidence that is not known is left out."""
    seeds = f"{n} seed{'s' if n != 1 else ''}"
    if method not in INTERVALS or confidence is None:
        return f"over {seeds}"
    return f"{100 * confidence:g}% {INTERVALS[method].name} over {seeds}"


def interval(values, confidence: float = 0.95, method: str = DEFAULT_METHOD, n_boot: int = 10000,
             seed: int = 0, bounds: tuple[float, float] | None = None) -> Summary:
    """Mean of `values` (None = n/a) with `method`'s interval; lo = hi = None below its minimum seeds.
    `bounds`: the range the metric cannot leave (an accuracy's [0, 1]); the interval is clipped to it, which
    keeps its coverage (the true mean lies inside the bounds) and drops impossible ends like 112%."""
    s = _interval(values, confidence, method, n_boot, seed)
    if bounds is None or s.lo is None:
        return s
    s.lo, s.hi = min(max(s.lo, bounds[0]), bounds[1]), min(max(s.hi, bounds[0]), bounds[1])
    return s


def _interval(values, confidence: float, method: str, n_boot: int, seed: int) -> Summary:
    spec = INTERVALS[method]
    vals = np.asarray([v for v in checked(values) if v is not None], dtype=np.float64)
    if vals.size == 0:
        return Summary(0, None, None, None, method, confidence)
    mean = float(vals.mean())
    # one seed has no spread, so no interval (lo = hi = the value would read as a verdict to a judge)
    if vals.size < max(2, spec.min_seeds):
        return Summary(int(vals.size), mean, None, None, method, confidence)
    lo, hi = spec.fn(vals[None, :], confidence, n_boot, seed)
    if np.isnan(lo[0]) or np.isnan(hi[0]):
        return Summary(int(vals.size), mean, None, None, method, confidence)
    return Summary(int(vals.size), mean, float(lo[0]), float(hi[0]), method, confidence)


def bootstrap_ci(values, confidence: float = 0.95, n_boot: int = 10000, seed: int = 0) -> Summary:
    """Percentile bootstrap of the mean (Efron & Tibshirani 1993, ch. 13); None values are n/a. Kept for
    comparison: it under-covers with few seeds (docs/statistics.md); reports use `interval`."""
    return interval(values, confidence, "percentile_bootstrap", n_boot, seed)


def success_rate(values, threshold: float) -> float | None:
    vals = [v for v in checked(values) if v is not None]
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


def paired_diffs(a_by_seed: dict, b_by_seed: dict) -> list[float]:
    """a - b on the seeds both have a value for, in seed order."""
    checked([*a_by_seed.values(), *b_by_seed.values()])
    seeds = sorted(s for s in a_by_seed if s in b_by_seed and a_by_seed[s] is not None and b_by_seed[s] is not None)
    return [a_by_seed[s] - b_by_seed[s] for s in seeds]


def paired(a_by_seed: dict, b_by_seed: dict, a: str, b: str, confidence: float, n_boot: int,
           method: str = DEFAULT_METHOD) -> Comparison:
    return Comparison(a, b, interval(paired_diffs(a_by_seed, b_by_seed), confidence, method, n_boot))


# ---- decisions with a margin ---------------------------------------------------------------------------
# A CI that contains 0 says "not shown to differ", not "the same": with few seeds it contains 0 for
# differences far larger than anyone would call equal. Equivalence needs a margin and an interval inside it.
# Every decision is a Student t test on the paired differences, so it agrees with the t-interval a report
# prints beside it: `>` holds exactly when the two-sided `confidence` interval lies above 0.

def _t_stats(diffs) -> tuple[int, float, float] | None:
    """(n, mean, standard error) of the non-None values; None below the t-interval's minimum seeds."""
    vals = np.asarray([d for d in checked(diffs, "a paired difference") if d is not None], dtype=np.float64)
    if vals.size < max(2, INTERVALS[DEFAULT_METHOD].min_seeds):
        return None
    return int(vals.size), float(vals.mean()), spread(vals) / math.sqrt(vals.size)


def spread(vals: np.ndarray) -> float:
    """The sample standard deviation, 0 when it is rounding-level (seeds that agree up to float error, e.g. the
    same share computed in two orders): the tests and the seed estimate then use the exact sign-flip rule."""
    sd = float(vals.std(ddof=1))
    return 0.0 if sd <= 1e-12 * max(1.0, float(np.abs(vals).max())) else sd


def p_above(diffs, bound: float) -> float | None:
    """One-sided t test p-value of "the mean difference is above `bound`" (H0: mean <= bound)."""
    st = _t_stats(diffs)
    if st is None:
        return None
    n, m, se = st
    if se == 0:  # no spread: t is undefined; the exact sign-flip test (Fisher 1935) gives 2^-n when every
        return 0.5 ** n if m > bound else 1.0  # seed lies above the bound (so 2 seeds never decide anything)
    return float(sps.t.sf((m - bound) / se, n - 1))


def p_below(diffs, bound: float) -> float | None:
    """One-sided t test p-value of "the mean difference is below `bound`" (H0: mean >= bound)."""
    flipped = [None if d is None else -d for d in checked(diffs, "a paired difference")]
    return p_above(flipped, -bound)


@dataclass(frozen=True)
class Decision:
    """One relation on paired differences a - b. p_shown / p_refuted are on the scale of 1 - confidence:
    the relation is shown (refuted) at level alpha when that p is below alpha; None: fewer than two seeds."""
    rel: str  # ">", ">=" or "~"
    margin: float | None
    p_shown: float | None
    p_refuted: float | None

    def state(self, alpha: float, p_shown: float | None = None, p_refuted: float | None = None) -> bool | None:
        """True (shown), False (refuted) or None (inconclusive) at `alpha`; p-values may be given adjusted."""
        ps = self.p_shown if p_shown is None else p_shown
        pr = self.p_refuted if p_refuted is None else p_refuted
        if ps is None:
            return None
        if ps < alpha:
            return True
        return False if pr is not None and pr < alpha else None


RELATIONS = (">=", ">", "~")


def decide(diffs, rel: str, margin: float | None = None) -> Decision:
    """p-values for `rel` on the paired differences a - b:

    a > b    shown: the mean is above 0; refuted: below 0. Both two-sided (2 x the one-sided p), so at
             alpha = 1 - confidence `>` holds exactly when the printed interval lies above 0.
    a >= b   (no worse) shown: above -margin; refuted: below -margin (two-sided as above).
    a ~ b    (the same) shown: TOST, the mean both above -margin and below +margin (the larger of the two
             one-sided p's, Schuirmann 1987: the 1 - 2 alpha interval inside +-margin); refuted: the mean
             outside +-margin (twice the smaller one-sided p).
    `>=` and `~` need a margin; without one they can be neither shown nor refuted."""
    if rel not in RELATIONS:
        raise ValueError(f"relation {rel!r} is not one of {RELATIONS}")
    if rel != ">" and margin is None:
        return Decision(rel, None, None, None)
    if rel == ">":
        ps, pr = p_above(diffs, 0.0), p_below(diffs, 0.0)
    elif rel == ">=":
        ps, pr = p_above(diffs, -margin), p_below(diffs, -margin)
    else:
        lo, hi = p_above(diffs, -margin), p_below(diffs, margin)
        ps = None if lo is None else max(lo, hi)
        pr = None if lo is None else 2 * min(p_below(diffs, -margin), p_above(diffs, margin))
        return Decision(rel, margin, ps, None if pr is None else min(1.0, pr))
    two = lambda p: None if p is None else min(1.0, 2 * p)  # noqa: E731
    return Decision(rel, margin, two(ps), two(pr))


def equivalent(diffs, margin: float, alpha: float = 0.05) -> bool | None:
    """TOST (Schuirmann 1987): both one-sided tests at `alpha` reject, i.e. the 1 - 2 alpha t interval lies
    inside (-margin, margin). None with fewer than two values."""
    d = decide(diffs, "~", margin)
    return None if d.p_shown is None else d.p_shown < alpha


def non_inferior(diffs, margin: float, alpha: float = 0.025) -> bool | None:
    """a - b is not worse than -margin: the one-sided t test at `alpha` (the lower end of the two-sided
    1 - 2 alpha interval, 95% by default as the ICH E9 convention) is above -margin. None without interval."""
    p = p_above(diffs, -margin)
    return None if p is None else p < alpha


def t_test_pvalue(diffs) -> float | None:
    """Two-sided one-sample t test of mean(diffs) = 0: the p-value the adjustments below take."""
    d = decide(diffs, ">")
    return None if d.p_shown is None else min(d.p_shown, d.p_refuted)


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


def seeds_needed(diffs, confidence: float = 0.95, rel: str = ">", margin: float | None = None,
                 limit: int = 10_000) -> int | None:
    """Seeds the decision of `rel` needs, if the mean and spread stay what these seeds show: the smallest
    n >= 3 (the t-interval's minimum) whose t test at `confidence` would decide it (shown or refuted) with this
    mean and standard deviation. None with fewer than two seeds, when no number of seeds decides it (a mean
    difference of exactly 0 for `>`, exactly on the margin for `>=`/`~`, or no margin), or beyond `limit`. Before any
    adjustment for many comparisons: a Holm-adjusted table may need more."""
    vals = np.asarray([d for d in checked(diffs, "a paired difference") if d is not None], dtype=np.float64)
    if vals.size < 2 or (rel != ">" and margin is None):
        return None
    m, sd = float(vals.mean()), spread(vals)
    alpha = 1 - confidence
    if rel == "~":  # shown if |m| < margin (TOST at alpha), refuted if |m| > margin (two-sided)
        gap, q = abs(margin - abs(m)), (alpha if abs(m) < margin else alpha / 2)
    else:
        gap, q = abs(m + (margin if rel == ">=" else 0.0)), alpha / 2
    if gap == 0:
        return None
    # t_{1-q, n-1} * sd / sqrt(n) < gap: the left side falls with n; double, then bisect
    fits = lambda n: sps.t.ppf(1 - q, n - 1) * sd / math.sqrt(n) < gap  # noqa: E731
    first = max(2, INTERVALS[DEFAULT_METHOD].min_seeds)  # fewer seeds give no interval at all
    if sd == 0:
        return max(first, 6)  # no spread: the sign-flip test needs 2^-n < alpha / 2, i.e. 6 seeds at 95%
    hi = first
    while not fits(hi):
        if hi >= limit:
            return None
        hi = min(limit, 2 * hi)
    lo = max(first, hi // 2)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo


# ---- a table of pairwise orderings ------------------------------------------------------------------------

@dataclass(frozen=True)
class PairVerdict:
    a: str
    b: str
    diff: Summary  # interval of a - b over paired seeds
    verdict: str  # ">" or "<" (shown to differ, that way), "~" (shown the same within the margin), "?" (neither)
    p_differ: float | None  # two-sided t test, adjusted over the table's pairs
    p_same: float | None  # TOST within +-margin, adjusted likewise (None without a margin)


def pairwise(per_pe: dict[str, dict], confidence: float = 0.95, n_boot: int = 10000, margin: float | None = None,
             adjust: str = "holm") -> list[PairVerdict]:
    """Every pair of `per_pe` = {pe: {seed: value}} (in its order) as one family: two-sided paired t tests of
    "they differ" and TOST tests of "the same within +-margin", each set adjusted with `adjust` ("holm":
    family-wise error; "bh": false discovery rate) over the pairs that have two or more seeds."""
    adjuster = {"holm": holm, "bh": benjamini_hochberg}[adjust]
    names = list(per_pe)
    pairs = [(a, b, paired_diffs(per_pe[a], per_pe[b])) for i, a in enumerate(names) for b in names[i + 1:]]
    p_diff = [t_test_pvalue(d) for _, _, d in pairs]
    p_same = [decide(d, "~", margin).p_shown if margin is not None else None for _, _, d in pairs]
    judged = [i for i, p in enumerate(p_diff) if p is not None]
    adj_diff, adj_same = [None] * len(pairs), [None] * len(pairs)
    for i, p in zip(judged, adjuster([p_diff[i] for i in judged])):
        adj_diff[i] = p
    same_idx = [i for i in judged if p_same[i] is not None]
    for i, p in zip(same_idx, adjuster([p_same[i] for i in same_idx])):
        adj_same[i] = p
    alpha = 1 - confidence
    out = []
    for (a, b, d), pd, ps in zip(pairs, adj_diff, adj_same):
        s = interval(d, confidence, DEFAULT_METHOD, n_boot)
        v = "?"
        if pd is not None and pd < alpha:
            v = ">" if s.mean > 0 else "<"
        elif ps is not None and ps < alpha:
            v = "~"
        out.append(PairVerdict(a, b, s, v, pd, ps))
    return out
