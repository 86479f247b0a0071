"""stats.py refuses a value that is not None or a finite number wherever it is given one (item 2): a NaN
difference was a p-value of 1.0 and a NaN mean `nan [no interval]`, a string a TypeError."""

import numpy as np
import pytest

from posbench.errors import DataError
from posbench.stats import (
    decide,
    interval,
    paired_diffs,
    pairwise,
    seeds_needed,
    success_rate,
    t_test_pvalue,
)

BAD = [(float("nan"), "nan, not a finite number"), (float("inf"), "inf, not a finite number"),
       (-np.inf, "-inf, not a finite number"), ("0.5", "'0.5', not a number"), (True, "True, not a number")]


def test_item2_value_problem_by_hand():
    from posbench.stats import value_problem

    for good in (None, 0, 1, 0.25, -3.5, np.float32(0.5), np.int64(2)):
        assert value_problem(good) is None
    for bad, why in BAD:
        assert value_problem(bad) == why


@pytest.mark.parametrize("bad, why", BAD)
def test_item2_every_judge_refuses_it(bad, why):
    good = {0: 0.9, 1: 0.8, 2: 0.85, 3: 0.95}
    worse = {0: 0.5, 1: 0.55, 2: bad, 3: 0.52}
    calls = [lambda: pairwise({"a": good, "b": worse}, 0.95, 200, 0.02), lambda: paired_diffs(good, worse),
             lambda: interval(list(worse.values())), lambda: success_rate(list(worse.values()), 0.9),
             lambda: decide([0.1, 0.2, bad], ">"), lambda: t_test_pvalue([0.1, bad, 0.3]),
             lambda: seeds_needed([0.1, bad, 0.3]), lambda: decide([0.1, 0.2, bad], "~", 0.02)]
    for call in calls:
        with pytest.raises(DataError, match=why.replace("(", r"\(")):
            call()


def test_item2_none_is_still_n_a():
    p = pairwise({"a": {0: 0.9, 1: 0.8, 2: 0.85, 3: None}, "b": {0: 0.5, 1: 0.55, 2: 0.52, 3: 0.5}}, 0.95, 200)
    assert [(v.a, v.b, v.diff.n) for v in p] == [("a", "b", 3)]
    assert interval([None, None]).mean is None
