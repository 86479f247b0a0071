"""Solvers for the long-context families (RULER NIAH, variable tracking, common/frequent words, key-value
retrieval), written from the task definitions: each reads only the example's bytes (its token form), parses
the short prompt with regular expressions, and re-derives the answer and the unit count."""

from __future__ import annotations

import json
import re
from collections import Counter

from posbench.targets import IGNORE


def text_of(syms) -> str:
    return bytes(int(s[3:-1], 16) for s in syms).decode()


def byte_solver(fn):
    """fn(task, text) -> (prompt, answer, measured units); checks the bytes are prompt + answer and returns the
    next-byte targets over the answer."""
    def solve(task, syms, split):
        text = text_of(syms)
        prompt, answer, units = fn(task, text)
        assert text == prompt + answer, (text, prompt, answer)
        ids = list(b + 1 for b in text.encode())
        start = len(prompt.encode())
        targets = [IGNORE] * len(ids)
        for t in range(start - 1, len(ids) - 1):
            targets[t] = ids[t + 1]
        return answer, targets, units
    return solve


def niah(task, text):
    m = re.search(r"(What is (\w+)\? \2 is|What are all values of ([\w, ]+)\? They are)", text)
    prompt = text[:m.end()]
    asked = [m.group(2)] if m.group(2) else m.group(3).split(", ")
    body = text[:m.start()].strip()
    needles = re.findall(r"(\w+) is (\w+)\.", body)
    answer = " " + ", ".join(v for k in asked for kk, v in needles if kk == k)
    units = len(body.split()) - 3 * len(needles)
    return prompt, answer, units


def variable_tracking(task, text):
    m = re.search(r"Which variables equal (\d+)\? They are", text)
    prompt, body = text[:m.end()], text[:m.start()]
    assigned = {}
    for name, source in re.findall(r"VAR (\w+) = (VAR \w+|\d+)\.", body):
        assigned[name] = source
    holds = [n for n, s in assigned.items() if s == m.group(1)]
    grew = True
    while grew:  # follow the hops: a variable set to one that holds the value holds it too
        new = [n for n, s in assigned.items() if s.startswith("VAR ") and s[4:] in holds and n not in holds]
        holds += new
        grew = bool(new)
    statements = len(re.findall(r"VAR \w+ = ", body))
    hops = len(re.findall(r"VAR \w+ = VAR \w+\.", body))
    units = len(body.split()) - 4 * statements - hops
    return prompt, " " + " ".join(holds), units


def common_words(task, text):
    m = re.search(r"Which (\d+) words are most common\? They are", text)
    words = text[len("Words: "):m.start()].split()
    counts = Counter(words)
    n = int(m.group(1))
    top = sorted(counts, key=lambda w: -counts[w])[:n]
    assert all(counts[w] > counts[o] for w in top for o in counts if o not in top)  # a unique answer
    first = sorted(top, key=words.index)
    return text[:m.end()], " " + " ".join(first), len(counts) - n


def frequent_words(task, text):
    m = re.search(r"Which (\d+) words are most frequent\? They are", text)
    words = text[len("Text: "):m.start()].split()
    counts = Counter(words).most_common()
    n = int(m.group(1))
    ranked = [w for w, _ in counts]
    assert all(counts[i][1] > counts[i + 1][1] for i in range(min(n, len(counts) - 1)))  # no tie at the top
    return text[:m.end()], " " + " ".join(ranked[:n]), sum(c for _, c in counts[n:])


def kv_retrieval(task, text):
    m = re.search(r" Key: (\"\w+\") Value:", text)
    pairs = json.loads(text[:m.start()])
    key = json.loads(m.group(1))
    return text[:m.end()], " " + json.dumps(pairs[key]), len(pairs) - 1


def family_of(body: str):
    """A mixed example's family solver, read from its wording (the short prompts)."""
    for start, solve in (("Words: ", common_words), ("Text: ", frequent_words), ("{", kv_retrieval)):
        if body.startswith(start):
            return solve
    return variable_tracking if "Which variables equal" in body else niah


def ruler_mix(task, text):
    """A ruler_mix example: spaces that pad it to its length, then one family's example; the measured length is
    its tokens (bytes)."""
    body = text.lstrip(" ")
    pad = text[:len(text) - len(body)]
    prompt, answer, _ = family_of(body)(task, body)
    return pad + prompt, answer, len(text.encode())


LONG_CONTEXT_SOLVERS = {
    "niah_single": byte_solver(niah), "niah_multikey": byte_solver(niah), "niah_multivalue": byte_solver(niah),
    "niah_multiquery": byte_solver(niah), "variable_tracking": byte_solver(variable_tracking),
    "common_words": byte_solver(common_words), "frequent_words": byte_solver(frequent_words),
    "kv_retrieval": byte_solver(kv_retrieval), "ruler_mix": byte_solver(ruler_mix),
}
