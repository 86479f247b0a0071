"""The long-context families against hand-built expectations: where the needles sit (counted in a numbered
filler, f0 f1 f2 ..., so every filler word says where it came from), which values the answer lists, the hop
chains of variable tracking, word counts of the extraction tasks, the relevant pair's index in key-value
retrieval, and the baselines each example carries."""

import json
import re
from collections import Counter
from math import comb

import pytest

from posbench.data.tasks import TextFiller, build_task, get_task_class
from posbench.errors import ConfigError

NUMBERED = TextFiller(" ".join(f"f{i}" for i in range(100_000)))


def make(name, filler=None, **kw):
    return build_task(get_task_class(name).Config(**kw), filler)


def words_before(text: str, needle: str) -> int:
    """Filler words (f<i>) before `needle` in the text."""
    return sum(bool(re.fullmatch(r"f\d+", w)) for w in text[:text.index(needle)].split())


@pytest.mark.parametrize("units,depth,before", [(40, 0.0, 0), (40, 0.25, 10), (40, 0.5, 20), (40, 1.0, 40),
                                                 (7, 0.5, 4), (0, 0.7, 0)])
def test_single_needle_sits_after_round_depth_x_units_filler_words(units, depth, before):
    task = make("niah_single", NUMBERED)
    ex = task.example_at(3, 1, units, depth)
    (key, value), = re.findall(r"(\w+) is (\d{7})\.", ex.prompt)
    assert words_before(ex.prompt, f"{key} is {value}.") == before
    assert ex.prompt.endswith(f"What is {key}? {key} is") and ex.answer == f" {value}"
    # the filler is consecutive words of the text: f<a> f<a+1> ... around the needle
    fill = [int(w[1:]) for w in ex.prompt.split() if re.fullmatch(r"f\d+", w)]
    assert len(fill) == units and all(b == a + 1 for a, b in zip(fill, fill[1:]))
    assert ex.info["guess"] == 1.0 and ex.info["chance"] == pytest.approx(1 / 9_000_000)


def test_multikey_asks_one_key_among_distractors():
    task = make("niah_multikey", NUMBERED, value_digits=4)
    for index in range(10):
        ex = task.example_at(0, index, 30, 0.5)
        needles = re.findall(r"(\w+) is (\d{4})\.", ex.prompt)
        assert len(needles) == 4 and len({k for k, _ in needles}) == 4 and len({v for _, v in needles}) == 4
        asked = re.search(r"What is (\w+)\?", ex.prompt).group(1)
        value = dict(needles)[asked]
        assert ex.answer == f" {value}"
        assert words_before(ex.prompt, f"{asked} is {value}.") == 15  # the asked needle is the relevant one
        assert ex.info["guess"] == 0.25


def test_multivalue_answer_lists_every_value_in_text_order():
    task = make("niah_multivalue", NUMBERED)
    ex = task.example_at(0, 2, 50, 1.0)
    needles = re.findall(r"(\w+) is (\d{7})\.", ex.prompt)
    assert len({k for k, _ in needles}) == 1 and len(needles) == 4
    assert ex.answer == " " + ", ".join(v for _, v in needles)
    assert ex.prompt.endswith(f"What are all values of {needles[0][0]}? They are")
    assert ex.info["guess"] == 1 / 24  # the four values in the one right order of 4! orders


def test_multiquery_answer_follows_the_order_asked():
    task = make("niah_multiquery", NUMBERED, n_keys=3, n_queries=2, values="words")
    ex = task.example_at(0, 5, 20, 0.0)
    needles = dict(re.findall(r"(\w+) is ([a-z]+)\.", ex.prompt))
    asked = re.search(r"What are all values of ([\w, ]+)\? They are$", ex.prompt).group(1).split(", ")
    assert len(needles) == 3 and len(asked) == 2
    assert ex.answer == " " + ", ".join(needles[k] for k in asked)
    assert ex.info["guess"] == 1 / (3 * 2) and ex.info["chance"] == pytest.approx(70.0 ** -6)


def test_full_prompt_is_rulers_wording():
    ex = make("niah_multikey", NUMBERED, prompt="full").example_at(0, 0, 10, 0.5)
    assert ex.prompt.startswith("Some special magic numbers are hidden within the following text. Make sure to "
                                "memorize it. I will quiz you about the numbers afterwards.")
    assert len(re.findall(r"One of the special magic numbers for [a-z]+ is: \d{7}\.", ex.prompt)) == 4
    assert re.search(r"What are all the special magic numbers for ([a-z]+) mentioned in the provided text\? The "
                     r"special magic numbers for \1 mentioned in the provided text are$", ex.prompt)


def test_variable_tracking_chain_of_hops():
    task = make("variable_tracking", NUMBERED, n_hops=3, n_chains=2)
    ex = task.example_at(1, 0, 60, 0.5)
    statements = re.findall(r"VAR ([A-Z]+) = (VAR [A-Z]+|\d+)\.", ex.prompt)
    assert len(statements) == 2 * 4
    value = re.search(r"Which variables equal (\d+)\?", ex.prompt).group(1)
    # hand-followed: the variable given the value, then each one assigned from the last, in text order
    chain = [n for n, s in statements if s == value]
    for n, s in statements:
        if s == f"VAR {chain[-1]}":
            chain.append(n)
    assert len(chain) == 4 and ex.answer == " " + " ".join(chain)
    assert ex.info["chains"][0] == chain and ex.info["guess"] == 0.5
    fill = [w for w in ex.prompt.split() if re.fullmatch(r"f\d+", w)]
    assert len(fill) == 60


def test_common_words_counts():
    task = make("common_words", n_common=2, freq_common=3, freq_rare=1)
    ex = task.example_at(0, 0, 5, 0.5)
    words = ex.prompt[len("Words: "):ex.prompt.index(" Which")].split()
    counts = Counter(words)
    assert len(words) == 2 * 3 + 5 and sorted(counts.values()) == [1, 1, 1, 1, 1, 3, 3]
    common = [w for w in words if counts[w] == 3]
    assert ex.answer == " " + " ".join(dict.fromkeys(common))  # first-appearance order
    assert ex.prompt.endswith("Which 2 words are most common? They are")
    assert ex.info["guess"] == 1 / comb(7, 2)


def test_common_words_full_prompt_numbers_the_list():
    ex = make("common_words", prompt="full").example_at(0, 0, 3, 0.5)
    assert "1. " in ex.prompt and f"{3 * 4 + 3}. " in ex.prompt and f"{3 * 4 + 4}. " not in ex.prompt
    assert "What are the 3 most common words in the above list?" in ex.prompt


def test_frequent_words_zipf_counts_continue_upwards():
    task = make("frequent_words", n_answer=3, alpha=2.0)
    ex = task.example_at(0, 3, 40, 0.5)
    counts = Counter(ex.prompt[len("Text: "):ex.prompt.index(" Which")].split())
    answer = ex.answer.split()
    tail = {w: c for w, c in counts.items() if w not in answer}
    assert sum(tail.values()) == 40
    m = max(tail.values())
    # rank r of 3: max(m + 3 - r + 1, round(m * (4 / r)^2)), computed here by hand for r = 1, 2, 3
    expected = [max(m + 3, round(16 * m)), max(m + 2, round(4 * m)), max(m + 1, round(16 / 9 * m))]
    assert [counts[w] for w in answer] == expected
    assert make("frequent_words").answer_counts(0) == [3, 2, 1]
    assert make("frequent_words").answer_counts(5) == [80, 20, 9]


@pytest.mark.parametrize("units,depth,index", [(9, 0.0, 0), (9, 0.5, 4), (9, 1.0, 9), (1, 0.5, 0)])
def test_kv_retrieval_relevant_pair_index(units, depth, index):
    ex = make("kv_retrieval").example_at(2, 0, units, depth)
    body, key = ex.prompt.split(" Key: ")
    pairs = list(json.loads(body).items())
    asked = json.loads(key[:-len(" Value:")])
    assert len(pairs) == units + 1 and pairs[index][0] == asked and ex.answer == " " + json.dumps(pairs[index][1])
    assert ex.info["guess"] == 1 / (units + 1)


def test_kv_retrieval_uuid_keys():
    ex = make("kv_retrieval", key_chars=36, prompt="full").example_at(0, 0, 2, 0.5)
    assert re.fullmatch(r' "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"', ex.answer)
    assert ex.prompt.startswith("Extract the value corresponding to the specified key in the JSON object below.")


def test_mix_examples_stay_in_the_id_range_and_differ_from_evaluation():
    task = make("niah_multikey", value_digits=4)
    train = [task.example(0, i, "train") for i in range(30)]
    held = {task.example_at(0, i, u, 0.5).tokens_T.tobytes() for i in range(30) for u in (4, 16, 32)}
    assert not {t.tokens_T.tobytes() for t in train} & held
    assert all(4 <= t.info["units"] <= 32 for t in train)


@pytest.mark.parametrize("name,kw,message", [
    ("niah_multiquery", {"n_queries": 5}, "n_queries=5"),
    ("niah_single", {"value_digits": 0}, "value_digits=0"),
    ("variable_tracking", {"n_hops": 0}, "n_hops=0"),
    ("common_words", {"freq_rare": 4, "freq_common": 4}, "freq_rare < freq_common"),
    ("frequent_words", {"alpha": 1.0}, "alpha=1.0"),
    ("kv_retrieval", {"key_chars": 20}, "key_chars=20"),
])
def test_bad_options_fail_clearly(name, kw, message):
    with pytest.raises(ConfigError, match=message):
        get_task_class(name).Config(**kw)
