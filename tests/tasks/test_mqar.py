"""mqar against an example checked by hand, and its query slots against Zoology's power law."""

import numpy as np
import pytest

from posbench.data.tasks import IGNORE, build_task, get_task_class
from posbench.errors import ConfigError

TINY = dict(id_range=(2, 3), ood_range=(4, 5), vocab_size=16, tokens_per_pair=6)


def make(**kw):
    return build_task(get_task_class("mqar").Config(**kw))


def test_a_tiny_example_checked_by_hand():
    """vocab 16: keys k1..k7 (ids 1-7), values v8..v15 (ids 8-15). Seed 0, index 1, train: 2 pairs, 12 tokens.

        ids      1  8  2 12 |  2 13 10 12  4 12  1 15
        syms    k1 v8 k2 v12| k2 v13 v10 v12 k4 v12 k1 v15
        targets  -  -  -  - | 12  -  -  -  -  -  8  -

    k2 is asked at 4 (slot 0) and its target is v12, the value after k2 in the context; k1 at 10 (slot 3) -> v8.
    k4 in the filler is no context key, so nothing is asked there."""
    task = make(**TINY)
    ex = task.example(0, 1, "train")
    assert ex.tokens_T.tolist() == [1, 8, 2, 12, 2, 13, 10, 12, 4, 12, 1, 15]
    assert ex.targets_T.tolist() == [IGNORE] * 4 + [12] + [IGNORE] * 5 + [8, IGNORE]
    assert task.vocab.decode([1, 7, 8, 15]) == ["k1", "k7", "v8", "v15"]  # the ids are Zoology's: keys below V/2
    assert ex.answer == " v12 v8" and ex.prompt.endswith("k2 v13 v10 v12 k4 v12 k1 v15 ->")
    assert ex.info["pairs"] == 2 and ex.info["queries"] == 2


@pytest.mark.parametrize("split", ["train", "id", "ood"])
def test_structure_of_every_example(split):
    task = make(**TINY)
    half = 8
    for index in range(200):
        ex = task.example(5, index, split)
        tokens, targets = ex.tokens_T, ex.targets_T
        n = len(tokens) // 6
        keys, values = tokens[0:2 * n:2], tokens[1:2 * n:2]
        assert ((1 <= keys) & (keys < half)).all() and ((half <= values) & (values < 16)).all()  # (a) disjoint halves
        assert len(set(keys.tolist())) == n and len(set(values.tolist())) == n  # (c) no key (or value) repeats
        scored = np.flatnonzero(targets != IGNORE)
        assert len(scored) == n and (scored >= 2 * n).all() and ((scored - 2 * n) % 2 == 0).all()
        bound = dict(zip(keys.tolist(), values.tolist()))
        for t in scored:  # (b) each query's target is the value bound to that key in the context
            assert targets[t] == bound[int(tokens[t])]
        assert sorted(tokens[scored].tolist()) == sorted(keys.tolist())  # every key asked exactly once
        after = tokens[2 * n:]
        assert np.isin(after, keys).sum() == n  # filler never repeats a key: queries are unambiguous


def test_ood_is_longer_than_any_id_example():
    task = make(**TINY)
    id_len = max(len(task.example(0, i, s).tokens_T) for s in ("train", "id") for i in range(100))
    ood_len = min(len(task.example(0, i, "ood").tokens_T) for i in range(100))
    assert id_len == 18 == task.max_tokens("id") and ood_len == 24 > id_len  # (d) 3 pairs x 6 vs 4 pairs x 6


def test_chance_is_one_over_the_values():
    assert make(**TINY).chance_accuracy == 1 / 8  # (e) values v8..v15
    assert make().chance_accuracy == 1 / 4096  # Zoology's vocab 8,192


def test_queries_ask_a_subset():
    task = make(**{**TINY, "queries": 1})
    for index in range(50):
        ex = task.example(0, index, "ood")
        assert (ex.targets_T != IGNORE).sum() == 1 and len(ex.answer.split()) == 1


@pytest.mark.parametrize("power_a", [0.01, 0.3, 1.0])
def test_query_slots_follow_the_power_law(power_a):
    """One query per example, so each slot is one draw of P(s) ~ (s+1)^(power_a-1), s = 0..space-1 (Zoology's
    law over 1-based slots; 1.0 is uniform). The mean slot over 3,000 examples is within 4 standard errors."""
    n, tpp, count = 8, 16, 3000
    task = make(id_range=(n, n), ood_range=(n + 1, n + 1), vocab_size=64, tokens_per_pair=tpp, power_a=power_a,
                queries=1)
    space = (tpp * n - 2 * n) // 2
    w = np.arange(1, space + 1) ** (power_a - 1.0)
    p = w / w.sum()
    s = np.arange(space)
    mean, sd = (s * p).sum(), np.sqrt(((s - (s * p).sum()) ** 2 * p).sum())
    slots = []
    for index in range(count):
        ex = task.example(1, index, "train")
        (t,) = np.flatnonzero(ex.targets_T != IGNORE)
        slots.append((t - 2 * n) // 2)
    assert abs(np.mean(slots) - mean) < 4 * sd / np.sqrt(count), (np.mean(slots), mean)
    if power_a == 1.0:
        assert mean == pytest.approx((space - 1) / 2)
    if power_a == 0.01:
        assert mean < 0.5 * (space - 1) / 2  # bunched near the context, far from uniform


@pytest.mark.parametrize("kw,message", [
    ({"vocab_size": 100}, "vocab_size=100"),
    ({"vocab_size": 15, "id_range": (2, 3), "ood_range": (4, 5)}, "must be even"),
    ({"tokens_per_pair": 5}, "tokens_per_pair=5"),
    ({"power_a": 0.0}, "power_a=0.0"),
    ({"queries": 5}, "queries=5"),
])
def test_bad_values_fail_clearly(kw, message):
    with pytest.raises(ConfigError, match=message):
        get_task_class("mqar").Config(**kw)
