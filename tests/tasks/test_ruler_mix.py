"""ruler_mix: the long-context families mixed into one task whose lengths are tokens. Each example is exactly its
length (spaces before the family's text make up the gap), the unit fit is the largest that fits (hand-made size
functions), families are drawn about equally, and what cannot fit fails with a ConfigError. The answers themselves
are checked by the independent solver (tests/tasks/long_context_solvers.py, test_task_solvers.py)."""

from collections import Counter

import pytest

from posbench.data.tasks import build_task, get_task_class
from posbench.data.tasks.ruler_mix import default_families, fit_units
from posbench.errors import ConfigError
from tests.tasks.long_context_solvers import text_of


def mix(**kw):
    return build_task(get_task_class("ruler_mix").Config(**kw))


@pytest.mark.parametrize("size,length,units", [
    (lambda u: 10 + 3 * u, 40, 10),  # 40 fits, 43 does not
    (lambda u: 10 + 3 * u, 42, 10),
    (lambda u: 10 + u * u, 60, 7),  # 59 fits, 74 does not: the estimate from 8 units overshoots
    (lambda u: 10 + (u // 4) * 20, 55, 11),  # steps: 11 units give 50, 12 give 70
    (lambda u: 50 + u, 40, 0),  # nothing fits: no units
])
def test_fit_units_is_the_largest_that_fits(size, length, units):
    assert fit_units(size, length) == units


@pytest.mark.parametrize("length,split", [(128, "id"), (256, "ood"), (1024, "ood")])
def test_every_family_is_fitted_to_exactly_the_length(length, split):
    task = mix()
    for f, family in enumerate(task.families):
        for depth in (0.0, 1.0):
            ex = task.example_at(0, 3, f, length, depth, split)
            assert len(ex.tokens_T) == length == ex.info["length"], (family.name, depth)
            assert ex.info["family"] == family.name
            pad = ex.info["pad"]
            assert ex.prompt[:pad] == " " * pad and ex.prompt[pad] != " "
            assert text_of(task.vocab.decode(ex.tokens_T)) == ex.prompt + ex.answer


def test_a_family_with_no_room_keeps_its_own_length():
    """Multi-key NIAH's four needles and question take about 80 bytes: asked for 64 it writes them with no filler."""
    task = mix()
    ex = task.example_at(0, 0, task.family_index("niah_multikey"), 64, 0.5, "id")
    assert ex.info["units"] == 0 and ex.info["pad"] == 0 and 64 < len(ex.tokens_T) <= 128
    assert ex.prompt.count(" is ") == 5  # four needles and the question


def test_depth_places_the_relevant_needle():
    task = mix()
    f = task.family_index("niah_single")
    first, last = (task.example_at(1, 0, f, 512, d, "ood") for d in (0.0, 1.0))
    assert first.info["depth"] == 0.0 and last.info["depth"] == 1.0
    key = first.answer.strip()
    assert first.prompt.lstrip().split()[2].rstrip(".") == key  # "Key is value." opens the text
    value = last.answer.strip()
    assert last.prompt.index(f"is {value}.") > len(last.prompt) - 60  # just before the question


def test_families_are_drawn_about_equally_and_lengths_cover_the_range():
    task = mix()
    examples = task.examples(0, range(800), "train")
    counts = Counter(ex.info["family"] for ex in examples)
    assert set(counts) == {f.name for f in default_families()}
    assert all(70 <= n <= 130 for n in counts.values()), counts  # 100 each expected
    lengths = [len(ex.tokens_T) for ex in examples]
    assert min(lengths) == 64 and max(lengths) == 128


def test_options_that_cannot_fit_or_are_not_families_fail_clearly():
    big = get_task_class("niah_multikey").Config(n_keys=16)
    task = mix(id_range=(16, 32), ood_range=(33, 64), families=[big])
    with pytest.raises(ConfigError, match="niah_multikey.*more than the id split's longest length 32"):
        task.example(0, 0, "id")
    with pytest.raises(ConfigError, match="`reverse` is not a long-context family"):
        get_task_class("ruler_mix").Config(families=[get_task_class("reverse").Config()])
    with pytest.raises(ConfigError, match="twice"):
        get_task_class("ruler_mix").Config(families=[big, big])


def test_weights_set_each_familys_share():
    task = mix(weights={"kv_retrieval": 3, "niah_multikey": 2})  # 3 + 2 + 6 x 1 = 11 parts
    counts = Counter(ex.info["family"] for ex in task.examples(1, range(1100), "train"))
    assert 240 <= counts["kv_retrieval"] <= 360 and 150 <= counts["niah_multikey"] <= 250  # 300 and 200 expected
    assert all(60 <= counts[f] <= 140 for f in counts if f not in ("kv_retrieval", "niah_multikey"))
    with pytest.raises(ConfigError, match=r"weights name \['passkey'\]"):
        get_task_class("ruler_mix").Config(weights={"passkey": 2})
    with pytest.raises(ConfigError, match="must be numbers > 0"):
        get_task_class("ruler_mix").Config(weights={"kv_retrieval": 0})
