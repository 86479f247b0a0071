"""The contract every registered task keeps: purity in (seed, index, split), split separation, vocabulary
bounds, balance of the yes/no tasks, chance accuracy, and clear config errors."""

import os
import subprocess
import sys

import numpy as np
import pytest

from posbench.config_loader import from_dict
from posbench.data.tasks import (
    IGNORE,
    PAD_ID,
    TaskConfig,
    TextFiller,
    build_task,
    get_task_class,
    task_names,
)
from posbench.errors import ConfigError

FAST = {"needle": {"id_range": (16, 64), "ood_range": (100, 160)}}


def make(name, **kw):
    return build_task(get_task_class(name).Config(**{**FAST.get(name, {}), **kw}))


def same(a, b):
    return (a.prompt, a.answer) == (b.prompt, b.answer) and np.array_equal(a.tokens_T, b.tokens_T) \
        and np.array_equal(a.targets_T, b.targets_T)


@pytest.mark.parametrize("name", task_names())
def test_pure_in_seed_index_split(name):
    task, again = make(name), make(name)
    for split in ("train", "id", "ood"):
        a = [task.example(5, i, split) for i in range(20)]
        b = [again.example(5, i, split) for i in reversed(range(20))][::-1]  # order does not matter
        assert all(same(x, y) for x, y in zip(a, b))
        # different indices differ (a repeat is legitimate in small spaces, e.g. 3-number sorts: allow one)
        distinct = {x.tokens_T.tobytes() for x in a}
        assert len(distinct) >= len(a) - 1, f"{name}/{split}: different indices gave the same example"
        assert not same(task.example(5, 0, split), task.example(6, 0, split)), "the seed must matter"


@pytest.mark.parametrize("name", task_names())
def test_train_and_id_share_the_range_but_not_examples(name):
    task = make(name)
    train = {task.example(0, i, "train").tokens_T.tobytes() for i in range(150)}
    held = {task.example(0, i, "id").tokens_T.tobytes() for i in range(150)}
    assert not train & held


@pytest.mark.parametrize("name", task_names())
def test_tokens_and_targets_inside_the_vocabulary(name):
    task = make(name)
    assert task.vocab.symbols[PAD_ID] == "<pad>"
    for split in ("train", "ood"):
        for i in range(25):
            ex = task.example(1, i, split)
            assert ex.tokens_T.dtype == np.int64 and ex.targets_T.shape == ex.tokens_T.shape
            assert ((ex.tokens_T > PAD_ID) & (ex.tokens_T < task.vocab.size)).all()
            labelled = ex.targets_T[ex.targets_T != IGNORE]
            assert ((labelled > PAD_ID) & (labelled < task.vocab.size)).all()
            assert ex.text == ex.prompt + ex.answer and ex.answer.startswith(" ")


@pytest.mark.parametrize("name", task_names())
def test_chance_accuracy_is_a_probability(name):
    task = make(name)
    assert 0.0 < task.chance_accuracy <= 0.5
    assert task.summary and task.name == name


@pytest.mark.parametrize("name", [n for n in task_names() if get_task_class(n).binary])
@pytest.mark.parametrize("split", ["id", "ood"])
def test_binary_tasks_are_balanced(name, split):
    task = make(name)
    yes, no = task.vocab.id("<yes>"), task.vocab.id("<no>")
    labels = np.concatenate([task.example(2, i, split).targets_T for i in range(400)])
    labels = labels[labels != IGNORE]
    assert set(np.unique(labels)) <= {yes, no}
    assert 0.44 <= np.mean(labels == yes) <= 0.56
    assert task.chance_accuracy == 0.5


def test_binary_flag_marks_exactly_the_yes_no_tasks():
    assert sorted(n for n in task_names() if get_task_class(n).binary) == ["k_back", "long_range_match",
                                                                           "shift_invariant"]


def test_stable_across_processes():
    """The RNG comes from a stable hash of (task, seed, split, index), not Python's salted hash()."""
    code = ("from posbench.data.tasks import build_task, get_task_class;"
            "t = build_task(get_task_class('reverse').Config());"
            "print(t.example(9, 123, 'id').tokens_T.tolist(), t.fingerprint)")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(s)}).stdout for s in (1, 2)}
    assert len(outs) == 1
    task = make("reverse")
    assert outs.pop().strip() == f"{task.example(9, 123, 'id').tokens_T.tolist()} {task.fingerprint}"


def test_filler_changes_text_only():
    """A user filler changes the haystack words, never the plan or the token form."""
    default, own = make("needle"), build_task(get_task_class("needle").Config(**FAST["needle"]),
                                              TextFiller(["Zebra quartz volcano. Yonder kettle marsh."]))
    a, b = default.example(0, 4, "id"), own.example(0, 4, "id")
    assert np.array_equal(a.tokens_T, b.tokens_T) and a.answer == b.answer
    assert "volcano." in b.prompt and "volcano" not in a.prompt
    assert default.fingerprint != own.fingerprint
    assert make("reverse").fingerprint == make("reverse").fingerprint != make("reverse", n_symbols=5).fingerprint


def test_retrieval_example_at_places_the_fact():
    passkey, needle = make("passkey"), make("needle")
    ex = passkey.example_at(0, 0, distance=37, prefix=11)
    syms = passkey.vocab.decode(ex.tokens_T)
    assert syms.index("<key>") == 11 and syms.index("<ask>") - (11 + 1 + 5) == 37
    for depth in (0.0, 0.5, 1.0):
        ex = needle.example_at(0, 0, filler_len=40, depth=depth)
        assert needle.vocab.decode(ex.tokens_T).index("<fact>") == round(depth * 40)


@pytest.mark.parametrize("name,kw,message", [
    ("reverse", {"ood_range": (5, 16)}, "must start above id_range"),
    ("reverse", {"id_range": (8, 3)}, "low > high"),
    ("reverse", {"id_range": (0, 3)}, "must be >= 1"),
    ("reverse", {"n_symbols": 1}, "n_symbols=1"),
    ("sort", {"id_range": (3, 6, 9)}, "must be [low, high]"),
    ("passkey", {"context": 10}, "context=10"),
    ("passkey", {"id_range": (0.0, 0.001)}, "no whole distance"),
    ("copy_distance", {"payload": 0}, "payload=0"),
    ("k_back", {"k": 8}, "start above k=8"),
    ("shift_invariant", {"pattern": "xyz"}, "pattern='xyz'"),
    ("shift_invariant", {"pattern": "ab", "n_symbols": 2}, "occurs by chance"),
    ("modular_sum", {"base": 1}, "base=1"),
    ("template", {"modulus": 2}, "modulus=2"),
    ("pig_latin", {"hyphen_prob": 1.5}, "hyphen_prob=1.5"),
    ("no_carry_add", {"id_range": (1, 5)}, ">= 2 numbers"),
    ("needle", {"value_digits": 0}, "value_digits=0"),
])
def test_bad_config_values_fail_clearly(name, kw, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        get_task_class(name).Config(**kw)


def test_configs_load_strictly_by_name():
    cfg = from_dict(TaskConfig, {"name": "sort", "id_range": [2, 4], "ood_range": [5, 9]}, "task")
    assert type(cfg) is get_task_class("sort").Config and cfg.id_range == (2, 4)
    with pytest.raises(ConfigError, match="did you mean `n_symbols`"):
        from_dict(TaskConfig, {"name": "sort", "n_symbol": 12}, "task")
    with pytest.raises(ConfigError, match="did you mean `reverse`"):
        from_dict(TaskConfig, {"name": "revers"}, "task")


def test_bad_split_and_index():
    task = make("reverse")
    with pytest.raises(ValueError, match="split must be one of"):
        task.example(0, 0, "test")
    with pytest.raises(ValueError, match=">= 0"):
        task.example(0, -1, "id")
