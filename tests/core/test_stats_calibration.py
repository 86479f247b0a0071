"""posbench.stats' interval methods, margin decisions and multiple-comparison adjustments against hand
computations, and a small calibration run that shows which methods hold their 95% (docs/statistics.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posbench.stats import (
    INTERVALS,
    Comparison,
    benjamini_hochberg,
    bootstrap_ci,
    decide,
    equivalent,
    holm,
    interval,
    non_inferior,
    paired,
    pairwise,
    seeds_needed,
    t_test_pvalue,
)

# [1, 2, 4]: mean 7/3, s^2 = (16/9 + 1/9 + 25/9) / 2 = 7/3, s / sqrt(3) = sqrt(7) / 3
MEAN, SE = 7 / 3, math.sqrt(7) / 3
T975_2, T95_2 = 4.302653, 2.919986  # Student t quantiles, 2 degrees of freedom (printed tables)


def test_t_interval_is_the_textbook_formula():
    s = interval([1.0, 2.0, 4.0], 0.95, "t_interval")
    assert s.n == 3 and s.mean == pytest.approx(MEAN)
    assert s.lo == pytest.approx(MEAN - T975_2 * SE, abs=1e-5)  # -1.46125
    assert s.hi == pytest.approx(MEAN + T975_2 * SE, abs=1e-5)  # 6.12791
    assert s.lo == pytest.approx(-1.46125, abs=1e-5)


def test_t_test_pvalue_by_hand():
    # t = mean / se = sqrt(7); with 2 degrees of freedom the two-sided p is 1 - t / sqrt(t^2 + 2) = 1 - sqrt(7) / 3
    assert t_test_pvalue([1.0, 2.0, 4.0]) == pytest.approx(1 - math.sqrt(7) / 3, rel=1e-9)
    assert t_test_pvalue([0.3]) is None


def test_percentile_bootstrap_numbers_are_unchanged():
    # pinned from the code before the registry existed (same generator draws, same quantiles, to the bit)
    s = bootstrap_ci([0.02, -0.01, 0.05])
    assert (s.lo.hex(), s.hi.hex()) == ("-0x1.47ae147ae147bp-7", "0x1.999999999999bp-5")
    s = bootstrap_ci([0.02, -0.01, 0.05, 0.03, 0.0], 0.9, 2000)
    assert (s.lo.hex(), s.hi.hex()) == ("0x1.0624dd2f1a9fep-9", "0x1.16872b020c49cp-5")
    s = bootstrap_ci([0.1, 0.3, -0.2, 0.05, 0.0, 0.12, 0.4, -0.05, 0.2, 0.01], 0.95, 10000, 7)
    assert (s.lo.hex(), s.hi.hex()) == ("-0x1.26e978d4fdf3ap-7", "0x1.916872b020c4ap-3")
    c = paired({1: 0.9, 2: 0.8, 3: 0.85}, {1: 0.88, 2: 0.81, 3: 0.8}, "a", "b", 0.95, 10000)
    assert c.diff == interval([0.9 - 0.88, 0.8 - 0.81, 0.85 - 0.8], 0.95, "t_interval")  # the default: Student t
    assert c.diff.label() == "95% t-interval over 3 seeds"


def test_below_a_methods_minimum_there_is_no_interval():
    assert INTERVALS["studentized_bootstrap"].min_seeds > 3
    s = interval([0.1, 0.2, 0.4], method="studentized_bootstrap")
    assert (s.n, s.lo, s.hi) == (3, None, None) and s.mean == pytest.approx(0.7 / 3)
    assert s.fmt() == "23.3 [no interval]"
    assert not Comparison("a", "b", s).distinguishable


@pytest.mark.parametrize("method", sorted(INTERVALS))
def test_identical_values_give_the_point(method):
    s = interval([0.5] * 6, method=method, n_boot=500)
    assert (s.lo, s.hi) == pytest.approx((0.5, 0.5))


def test_tost_on_hand_examples():
    # 90% t interval of [1, 2, 4]: 7/3 -+ 2.919986 * sqrt(7)/3 = [-0.24185, 4.90852]
    assert equivalent([1.0, 2.0, 4.0], margin=5.0) is True
    assert equivalent([1.0, 2.0, 4.0], margin=4.9) is False  # the upper end 4.9085 is outside
    assert equivalent([1.0, 2.0, 4.0], margin=0.25) is False  # contains 0, yet far from "the same"
    assert equivalent([1.0], margin=5.0) is None
    assert interval([1.0, 2.0, 4.0], 0.90, "t_interval").hi == pytest.approx(MEAN + T95_2 * SE, abs=1e-5)


def test_non_inferiority_on_hand_examples():
    # lower end of the two-sided 95% t interval: 7/3 - 4.302653 * sqrt(7)/3 = -1.46125
    assert non_inferior([1.0, 2.0, 4.0], margin=1.5) is True
    assert non_inferior([1.0, 2.0, 4.0], margin=1.4) is False
    assert non_inferior([2.0], margin=1.0) is None


def test_holm_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # 0.5 * 2 = 1.0, capped; 0.6 raised to it
    assert holm([]) == []


def test_benjamini_hochberg_by_hand():
    # sorted p * 4 / rank = 0.02, 0.02, 0.04, 0.04; running min from the largest keeps them
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    # 0.04 * 2 / 1 = 0.08, 0.05 * 2 / 2 = 0.05 -> the smaller p inherits 0.05
    assert benjamini_hochberg([0.04, 0.05]) == pytest.approx([0.05, 0.05])


def _false_positive_rate(method: str, n: int, draws: int = 600) -> float:
    x = np.random.default_rng([20, n]).standard_normal((draws, n))  # no true difference
    lo, hi = INTERVALS[method].fn(x, 0.95, 1000, 0)
    return float(np.mean((lo > 0) | (hi < 0)))


@pytest.mark.parametrize("n", [3, 5])
def test_the_t_interval_holds_its_95_percent(n):
    draws = 600
    se = math.sqrt(0.05 * 0.95 / draws)
    assert _false_positive_rate("t_interval", n, draws) <= 0.05 + 3 * se


def test_the_percentile_bootstrap_under_covers_at_three_seeds():
    # the documented defect: about 25% false positives at a nominal 5% (docs/statistics.md)
    assert _false_positive_rate("percentile_bootstrap", 3) > 0.15


def test_decisions_agree_with_the_printed_interval():
    # [1, 2, 4]: the 95% t interval is [-1.46125, 6.12791]; one-sided p of "above 0" is (1 - sqrt(7)/3) / 2
    d = decide([1.0, 2.0, 4.0], ">")
    assert d.p_shown == pytest.approx(1 - math.sqrt(7) / 3) and d.state(0.05) is None  # the interval holds 0
    assert decide([1.0, 2.0, 4.0], ">=", margin=1.5).state(0.05) is True  # lower end -1.461 > -1.5
    assert decide([1.0, 2.0, 4.0], ">=", margin=1.4).state(0.05) is None
    assert decide([-1.0, -2.0, -4.0], ">=", margin=0.1).state(0.05) is None  # upper end 1.46 is above -0.1
    assert decide([-5.0, -6.0, -5.5], ">").state(0.05) is False  # wholly below 0: refuted
    # `~`: shown when the 90% interval [-0.24185, 4.90852] is inside +-margin, refuted when wholly outside
    assert decide([1.0, 2.0, 4.0], "~", margin=5.0).state(0.05) is True
    assert decide([1.0, 2.0, 4.0], "~", margin=4.9).state(0.05) is None
    assert decide([10.0, 11.0, 10.5], "~", margin=2.0).state(0.05) is False
    assert decide([1.0, 2.0, 4.0], "~").p_shown is None  # no margin: neither shown nor refuted
    assert decide([1.0], ">").state(0.05) is None


def test_seeds_needed_uses_the_t_quantile():
    # mean 1, sd 1: n must satisfy t_{0.975, n-1} / sqrt(n) < 1; t_{.975,5} / sqrt(6) = 2.5706 / 2.449 = 1.05 fails,
    # t_{.975,6} / sqrt(7) = 2.4469 / 2.6458 = 0.925 holds (z would say 4: 1.96 / 2 < 1)
    diffs = [0.0, 2.0, 1.0 - math.sqrt(0.5), 1.0 + math.sqrt(0.5)]  # mean 1, sample sd 1
    assert np.mean(diffs) == pytest.approx(1) and np.std(diffs, ddof=1) == pytest.approx(1)
    assert seeds_needed(diffs) == 7
    assert seeds_needed([0.1, -0.1]) is None  # mean exactly 0: no number of seeds orders them
    assert seeds_needed(diffs, rel="~") is None  # no margin
    assert seeds_needed([0.3, 0.3, 0.3]) == 6  # no spread: the sign-flip test's 6
    # seeds equal up to float rounding (0.05 - 0.25 computed two ways) have no spread for the test either: the
    # estimate agrees with the sign-flip rule decide() applies, not a t quantile of a 1e-17 spread
    assert seeds_needed([0.05 - 0.25, (0.1 + 0.05 + 0.0) / 3 - 0.25, 0.05 - 0.25]) == 6
    assert seeds_needed([0.3, 0.31]) == 3  # never fewer than the 3 an interval needs


def test_pairwise_adjusts_over_the_table_with_holm():
    per_pe = {"a": {0: 0.9, 1: 0.95, 2: 0.92}, "b": {0: 0.5, 1: 0.52, 2: 0.49}, "c": {0: 0.5, 1: 0.51, 2: 0.50}}
    rows = {(p.a, p.b): p for p in pairwise(per_pe, margin=0.02)}
    raw = [t_test_pvalue([0.9 - 0.5, 0.95 - 0.52, 0.92 - 0.49]), t_test_pvalue([0.4, 0.44, 0.42]),
           t_test_pvalue([0.0, 0.01, -0.01])]
    assert [rows[k].p_differ for k in (("a", "b"), ("a", "c"), ("b", "c"))] == pytest.approx(holm(raw))
    assert rows[("a", "b")].verdict == ">" and rows[("a", "c")].verdict == ">"
    assert rows[("b", "c")].verdict == "?"  # 90% interval +-0.0169... inside +-0.02, but Holm over 3 lifts p
    assert pairwise({"x": {0: 0.1}, "y": {0: 0.2}})[0].p_differ is None


def _judge_rates(n: int, draws: int = 600):
    """Share of null draws where the pair table calls a difference, and of draws with a true difference equal to
    the margin where it calls the pair the same (both should be <= 5%)."""
    rng = np.random.default_rng([21, n])
    same = 0.0
    calls = 0
    for _ in range(draws):
        a, b = rng.standard_normal(n), rng.standard_normal(n)
        (p,) = pairwise({"a": dict(enumerate(a)), "b": dict(enumerate(b))}, margin=1.0)
        calls += p.verdict in "<>"
        (q,) = pairwise({"a": dict(enumerate(a + 1.0)), "b": dict(enumerate(b))}, margin=1.0)
        same += q.verdict == "~"
    return calls / draws, same / draws


@pytest.mark.parametrize("n", [3, 5])
def test_the_judges_hold_five_percent(n):
    se = math.sqrt(0.05 * 0.95 / 600)
    fpr, false_same = _judge_rates(n)
    assert fpr <= 0.05 + 3 * se and false_same <= 0.05 + 3 * se


def test_no_spread_is_decided_by_the_sign_flip_test():
    # every seed gives the same difference: t is undefined; the exact sign-flip test's one-sided p is 2^-n, so a
    # two-sided 5% decision needs n = 6 (2 * 2^-6 = 0.031), and 5 identical seeds (0.0625) decide nothing
    assert decide([0.1] * 5, ">").p_shown == pytest.approx(2 * 0.5 ** 5) and decide([0.1] * 5, ">").state(0.05) is None
    assert decide([0.1] * 6, ">").state(0.05) is True
    assert decide([0.0] * 5, "~", margin=0.02).p_shown == pytest.approx(0.5 ** 5)  # TOST: the larger one-sided p
    assert decide([0.0] * 3, "~", margin=0.02).state(0.05) is None  # three seeds at the same ceiling: not shown


def test_two_seeds_give_no_interval_and_decide_nothing():
    # at two seeds the t test calls 6% of null pairs different when runs collapse to chance (docs/statistics.md)
    assert INTERVALS["t_interval"].min_seeds == 3
    s = interval([0.2, 0.9])
    assert (s.n, s.lo, s.hi) == (2, None, None) and s.fmt() == "55.0 [no interval]"
    assert decide([0.5, 0.6], ">").p_shown is None and t_test_pvalue([0.5, 0.6]) is None
