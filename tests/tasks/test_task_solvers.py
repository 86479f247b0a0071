"""Every task's answers and targets, re-derived by solvers written here from the example's own tokens.

The solvers read only the token form (decoded with the task's vocabulary) and the config; they never call
the task's generation or solving code. Each returns (answer text, targets, measured range value), and
the test checks them against the example and the split's ID/OOD range.
"""

import re

import numpy as np
import pytest

from posbench.data.tasks import IGNORE, build_task, get_task_class, task_names
from tests.tasks.long_context_solvers import LONG_CONTEXT_SOLVERS

N_EXAMPLES = 40


def next_token_targets(ids, prompt_len):
    """Targets of an answer-style example: token t+1 over the answer, IGNORE elsewhere."""
    out = [IGNORE] * len(ids)
    for t in range(prompt_len - 1, len(ids) - 1):
        out[t] = ids[t + 1]
    return out


def answer_style(task, syms, prompt_len, answer_syms):
    """Check the answer tokens equal the solver's and return the expected targets."""
    assert syms[prompt_len:] == answer_syms, (syms, answer_syms)
    return next_token_targets(task.vocab.ids(syms), prompt_len)


def solve_transform(fn):
    def solve(task, syms, split):
        i = syms.index("<sep>")
        out = fn(syms[:i])
        targets = answer_style(task, syms, i + 1, out + ["<end>"])
        return " " + " ".join(out), targets, i
    return solve


def solve_no_carry_add(task, syms, split):
    i = syms.index("=")
    numbers = [int(n) for n in "".join(syms[:i]).split("+")]
    total = sum(numbers)
    for p in range(task.cfg.digits):  # no column may carry
        assert sum((n // 10**p) % 10 for n in numbers) <= 9
    assert total < 10**task.cfg.digits
    targets = answer_style(task, syms, i + 1, list(str(total)) + ["<end>"])
    return " " + str(total), targets, len(numbers)


def pig_latin_reference(word):
    """Independent rules: vowel start -> +way; else (qu | first letter) then consonants, y a vowel after
    the first letter, moved to the end + ay."""
    if "-" in word:
        return "-".join(pig_latin_reference(p) for p in word.split("-"))
    if word[0] in "aeiou":
        return word + "way"
    head, tail, rest = re.match(r"^(qu|[^aeiou])((?:qu|[^aeiouy])*)(.*)$", word).groups()
    return rest + head + tail + "ay"


def solve_pig_latin(task, syms, split):
    i = syms.index("<sep>")
    word = "".join(syms[:i])
    out = pig_latin_reference(word)
    targets = answer_style(task, syms, i + 1, list(out) + ["<end>"])
    return " " + out, targets, sum(c.isalpha() for c in word)


def solve_template(task, syms, split):
    cfg = task.cfg
    assert syms[0] == "<start>"
    mid = syms.index("<mid>")
    given = [int(s) for s in syms[1:mid]]
    step = (given[1] - given[0]) % cfg.modulus
    assert step != 0
    assert all((b - a) % cfg.modulus == step for a, b in zip(given, given[1:]))
    cont = [str((given[-1] + step * (j + 1)) % cfg.modulus) for j in range(cfg.continuation)]
    frame = 1 + cfg.split_range(split)[1] + 1 + cfg.continuation + 1
    answer = cont + ["<end>"] + ["<fill>"] * (frame - (mid + 1) - len(cont) - 1)
    targets = answer_style(task, syms, mid + 1, answer)
    assert len(syms) == frame
    text = " ".join(cont + ["]"] + ["."] * (frame - mid - 2 - len(cont)))
    return " " + text, targets, len(given)


def solve_recall(open_mark, close_mark, size_of):
    """passkey / copy_distance: the payload after `open_mark`, asked for after `close_mark`."""
    def solve(task, syms, split):
        n = size_of(task.cfg)
        start = syms.index(open_mark) + 1
        payload = syms[start:start + n]
        ask = syms.index(close_mark)
        targets = answer_style(task, syms, ask + 1, payload + ["<end>"])
        distance = ask - (start + n)
        room = task.cfg.context - (2 * n + 3)
        sep = "" if open_mark == "<key>" else " "
        return " " + sep.join(payload), targets, distance / room
    return solve


def solve_needle(task, syms, split):
    d = task.cfg.value_digits
    fact = syms.index("<fact>")
    key, value = syms[fact + 1], syms[fact + 2:fact + 2 + d]
    ask = syms.index("<ask>")
    assert syms[ask + 1] == key
    targets = answer_style(task, syms, ask + 2, value + ["<end>"])
    return " " + "".join(value), targets, sum(s.startswith("<f") and s != "<fact>" for s in syms)


def solve_modular_sum(task, syms, split):
    total, labels = 0, []
    for s in syms:
        labels.append(str(total))
        total = (total + int(s)) % task.cfg.base
    return " " + " ".join(labels), task.vocab.ids(labels), len(syms)


def solve_k_back(task, syms, split):
    k = task.cfg.k
    same = [syms[t] == syms[t - k] for t in range(k, len(syms))]
    targets = [IGNORE] * k + [task.vocab.id("<yes>" if s else "<no>") for s in same]
    return " " + " ".join("yes" if s else "no" for s in same), targets, len(syms)


def solve_mqar(task, syms, split):
    """Pairs from the length; the context is `k v k v ...`; after it every context key is a query whose target is
    the value bound to it, the answer those values in reading order."""
    n = len(syms) // task.cfg.tokens_per_pair
    bound = dict(zip(syms[0:2 * n:2], syms[1:2 * n:2]))
    assert len(bound) == n and all(k[0] == "k" for k in bound) and all(v[0] == "v" for v in bound.values())
    targets = [IGNORE] * len(syms)
    asked = []
    for t in range(2 * n, len(syms)):
        if syms[t] in bound:
            targets[t] = task.vocab.id(bound[syms[t]])
            asked.append(bound[syms[t]])
    return " " + " ".join(asked), targets, n


def last_label(fn):
    def solve(task, syms, split):
        yes = fn(task, syms)
        targets = [IGNORE] * (len(syms) - 1) + [task.vocab.id("<yes>" if yes else "<no>")]
        return " yes" if yes else " no", targets, len(syms)
    return solve


def solve_arithmetic(op):
    """Default format (every number least significant digit first): read the operands back, compute, write the
    result reversed."""
    def solve(task, syms, split):
        sign, eq = syms.index(op), syms.index("=")
        a, b = "".join(syms[:sign])[::-1], "".join(syms[sign + 1:eq])[::-1]
        result = str(int(a) * int(b) if op == "*" else int(a) + int(b))[::-1]
        targets = answer_style(task, syms, eq + 1, list(result) + ["<end>"])
        return " " + result, targets, max(len(a), len(b))
    return solve


SOLVERS = {
    "addition": solve_arithmetic("+"),
    "multiplication": solve_arithmetic("*"),
    "reverse": solve_transform(lambda xs: xs[::-1]),
    "simple_copy": solve_transform(lambda xs: list(xs)),
    "sort": solve_transform(lambda xs: sorted(xs, key=int)),
    "no_carry_add": solve_no_carry_add,
    "pig_latin": solve_pig_latin,
    "template": solve_template,
    "passkey": solve_recall("<key>", "<ask>", lambda cfg: cfg.key_digits),
    "copy_distance": solve_recall("<copy>", "<paste>", lambda cfg: cfg.payload),
    "needle": solve_needle,
    "modular_sum": solve_modular_sum,
    "k_back": solve_k_back,
    "mqar": solve_mqar,
    "shift_invariant": last_label(lambda task, syms: task.cfg.pattern in "".join(syms)),
    "long_range_match": last_label(lambda task, syms: syms[0] == syms[-1]),
    **LONG_CONTEXT_SOLVERS,
}

# Where the issue fixes the ranges, the defaults must match it.
ISSUE_RANGES = {
    "passkey": ((0.25, 1.0), (1.5, 2.0)), "copy_distance": ((0.25, 1.0), (1.5, 2.0)),
    "reverse": ((3, 8), (9, 16)), "sort": ((3, 6), (7, 10)), "no_carry_add": ((2, 5), (6, 8)),
    "simple_copy": ((4, 12), (13, 20)),
}


def small(name):
    """Defaults, with long-context tasks shrunk so the test stays fast."""
    cfg = get_task_class(name).Config()
    if name == "needle":
        cfg = get_task_class(name).Config(id_range=(16, 64), ood_range=(100, 160))
    return build_task(cfg)


def test_every_task_has_a_solver():
    assert sorted(SOLVERS) == task_names()


@pytest.mark.parametrize("name,ranges", sorted(ISSUE_RANGES.items()))
def test_issue_ranges_are_the_defaults(name, ranges):
    cfg = get_task_class(name).Config()
    assert (cfg.id_range, cfg.ood_range) == ranges


@pytest.mark.parametrize("name", sorted(SOLVERS))
@pytest.mark.parametrize("split", ["train", "id", "ood"])
def test_solver_agrees_and_ranges_hold(name, split):
    task = small(name)
    lo, hi = task.cfg.split_range(split)
    for index in range(N_EXAMPLES):
        ex = task.example(3, index, split)
        syms = task.vocab.decode(ex.tokens_T)
        answer, targets, measured = SOLVERS[name](task, syms, split)
        assert ex.answer == answer, (name, index, ex.prompt, ex.answer, answer)
        np.testing.assert_array_equal(ex.targets_T, np.asarray(targets))
        assert lo - 1e-9 <= measured <= hi + 1e-9, (name, split, measured, (lo, hi))
        assert len(ex.tokens_T) <= task.max_tokens(split)
        assert (ex.targets_T != IGNORE).any()


def test_pig_latin_rules_on_known_words():
    from posbench.data.tasks.pig_latin import to_pig_latin

    known = {"strong": "ongstray", "apple": "appleway", "rhythm": "ythmrhay", "queen": "eenquay",
             "squeal": "ealsquay", "hmm": "hmmay", "well-known": "ellway-ownknay", "yellow": "ellowyay",
             "eat-in": "eatway-inway"}
    for word, expected in known.items():
        assert pig_latin_reference(word) == expected
        assert to_pig_latin(word) == expected


def test_text_form_states_the_same_fact():
    """The text of the retrieval tasks carries the same key/value as the token form."""
    passkey = small("passkey")
    for index in range(10):
        ex = passkey.example(0, index, "id")
        key = re.search(r"The pass key is (\d+)\. Remember it\.", ex.prompt).group(1)
        assert ex.answer == " " + key and ex.prompt.endswith("What is the pass key? The pass key is")
    needle = small("needle")
    for index in range(10):
        ex = needle.example(0, index, "ood")
        city, value = re.search(r"The special magic number for (\w+) is (\d+)\.", ex.prompt).groups()
        assert ex.answer == " " + value and ex.prompt.endswith(f"for {city} is")
        assert city == ex.info["key"]


@pytest.mark.parametrize("k", [1, 3])
def test_k_back_asking_the_last_item_only(k):
    task = build_task(get_task_class("k_back").Config(k=k, ask="last"))
    solve = last_label(lambda task, syms: syms[-1] == syms[-1 - k])
    labels = []
    for index in range(200):
        ex = task.example(5, index, "id")
        syms = task.vocab.decode(ex.tokens_T)
        answer, targets, _ = solve(task, syms, "id")
        assert ex.answer == answer and ex.prompt == f"Does the last letter equal the one {k} back? {' '.join(syms)} ->"
        np.testing.assert_array_equal(ex.targets_T, np.asarray(targets))
        labels.append(answer == " yes")
    assert 0.4 < np.mean(labels) < 0.6  # balanced: the last item copies its k-back one on a fair coin
