"""The shared base of the RULER-style long-context tasks (Hsieh et al. 2024, "RULER: What's the Real Context
Size of Your Long-Context Language Models?", arXiv 2404.06654; key-value retrieval after Liu et al. 2023,
"Lost in the Middle", arXiv 2307.03172): niah_single / niah_multikey / niah_multivalue / niah_multiquery
(ruler_niah.py), variable_tracking, common_words / frequent_words (word_extraction.py), kv_retrieval.

Every family is a text task: `render(rng, units, depth)` writes a prompt whose size grows with `units` (filler
words, distractor pairs, list words: each family says which) and, for the families that have one, puts the
relevant item after `round(depth x units)` units. The evaluator (evaluation/suites/long_context.py) fits
`units` to each context length in the checkpoint's tokenizer; the pretraining mix (`data.mix`) draws `units`
from `id_range` and the depth uniformly, so a model pretrained with a family is asked in the format it saw.

Token form: the UTF-8 bytes of prompt + answer (ids 1..256, 0 is <pad>), targets on the answer's bytes. These
tasks are about text at a length, so their own token form is their text, byte for byte.

Baselines (per example, in `info`): `chance` is exact match by guessing uniformly over the answer's space
(values, names, words); `guess` is exact match by a question-blind reader that picks uniformly among the
context's candidate answers of the right shape (a random needle's value, a random chain, ...): 1/4 for
multi-key NIAH with four keys. The evaluator puts both beside each score, with the commonest answer's share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from posbench.data.tasks.filler import GeneratedFiller, TextFiller
from posbench.data.tasks.task import Example, Task, TaskConfig, Vocab, answer_rows, uniform_int

BYTE_SYMBOLS = [f"<0x{b:02x}>" for b in range(256)]
CONSONANTS, VOWELS = "bdfgklmnprstvz", "aeiou"  # 70 syllables: pseudo-words no tokenizer has seen whole
GENERATED_WORD_BYTES = 10  # the longest word GeneratedFiller writes ("mountain." + a space)


def byte_rows(prompt: str, answer: str) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, targets) of the text's bytes: id = byte + 1, targets on the answer's bytes."""
    return answer_rows([b + 1 for b in prompt.encode()], [b + 1 for b in answer.encode()])


def pseudo_word(rng: np.random.Generator, syllables: int) -> str:
    picks = rng.integers(len(CONSONANTS), size=syllables), rng.integers(len(VOWELS), size=syllables)
    return "".join(CONSONANTS[c] + VOWELS[v] for c, v in zip(*picks, strict=True))


def distinct_words(rng: np.random.Generator, n: int, syllables: int, avoid: set[str] = frozenset()) -> list[str]:
    """n different pseudo-words (none in `avoid`), in the order drawn. Once half of the words of the current
    length are drawn, the next ones get a syllable more, so any n exists and redraws stay rare."""
    out, seen, s, drawn = [], set(avoid), syllables, 0
    while len(out) < n:
        if drawn >= 70**s // 2:
            s, drawn = s + 1, 0
        w = pseudo_word(rng, s)
        if w not in seen:
            seen.add(w)
            out.append(w)
            drawn += 1
    return out


def number(rng: np.random.Generator, digits: int) -> str:
    return str(int(rng.integers(10 ** (digits - 1), 10**digits)))


def distinct_numbers(rng: np.random.Generator, n: int, digits: int) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        v = number(rng, digits)
        if v not in out:
            out.append(v)
    return out


def permutations(n: int, k: int) -> int:
    """Ordered picks of k of n distinct items: n! / (n - k)!."""
    out = 1
    for i in range(k):
        out *= max(n - i, 1)
    return out


def spread(rng: np.random.Generator, n_items: int, units: int) -> list[int]:
    """Sorted insertion points (after how many units) of n_items things placed uniformly among `units` units."""
    return sorted(int(p) for p in rng.integers(0, units + 1, size=n_items))


def interleave(words: list[str], items: list[tuple[int, str]]) -> str:
    """The words with each (after_units, text) item inserted after that many words, items in the given order
    where they share a point."""
    out, at = [], 0
    for after, text in items:
        out += words[at:after] + [text]
        at = max(at, after)
    return " ".join(out + words[at:])


def longest_word_bytes(filler) -> int:
    """Bytes of the longest word a filler hands out, plus its separating space (max_tokens' bound)."""
    if isinstance(filler, TextFiller):
        return 1 + max(len(w.encode()) for w in filler._words)
    if isinstance(filler, GeneratedFiller):
        return GENERATED_WORD_BYTES
    return 64


class LongContextTask(Task):
    """A RULER-style family: `render(rng, units, depth)`, its fixed bytes and bytes per unit for max_tokens."""

    depth_controlled: ClassVar[bool] = True  # False: the answer is spread over the context (no depth axis)

    @dataclass
    class Config(TaskConfig):
        id_range: tuple[int, int] = (4, 32)  # units (each family says which); the pretraining mix draws here
        ood_range: tuple[int, int] = (64, 512)
        range_min: ClassVar[float] = 0  # no units: the needles and the question alone

    def build_vocab(self) -> Vocab:
        return Vocab(BYTE_SYMBOLS)

    @property
    def chance_accuracy(self) -> float:
        return 1 / 256  # a byte; exact match of whole answers by chance is `info["chance"]`

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        units = uniform_int(rng, self.cfg.split_range(split))
        return self.render(rng, units, float(rng.random()))

    def example_at(self, seed: int, index: int, units: int, depth: float, split: str = "id") -> Example:
        """Example `index` with `units` units and (where the family has one) its relevant item at `depth`."""
        if units < 0 or not 0.0 <= depth <= 1.0:
            raise ValueError(f"need units >= 0 and depth in [0, 1], got {units}, {depth}")
        return self.keep_split(lambda rng: self.render(rng, units, depth), seed, index, split)

    def render(self, rng: np.random.Generator, units: int, depth: float) -> Example:
        raise NotImplementedError

    def fixed_bytes(self) -> int:
        """An upper bound on the bytes of an example with no units (instruction, needles, question, answer)."""
        raise NotImplementedError

    def unit_bytes(self) -> int:
        """An upper bound on the bytes one unit adds."""
        raise NotImplementedError

    def max_tokens(self, split: str) -> int:
        return self.fixed_bytes() + self.cfg.split_range(split)[1] * self.unit_bytes()


def text_example(prompt: str, answer: str, info: dict) -> Example:
    tokens, targets = byte_rows(prompt, answer)
    return Example(prompt, answer, tokens, targets, info)
