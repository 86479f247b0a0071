"""RULER's needle-in-a-haystack family (Hsieh et al. 2024, arXiv 2404.06654, section 3.1, "Retrieval"):
needles `key is value` hidden in filler, a question about some keys.

    niah_single      1 key, 1 value, asked for                          (RULER niah_single)
    niah_multikey    4 keys, one asked: the other 3 are distractors      (num_needle_k = 4)
    niah_multivalue  1 key with 4 values, all asked                     (num_needle_v = 4)
    niah_multiquery  4 keys, all asked                                   (num_needle_q = 4)

Keys are 2-syllable pseudo-words (RULER: adjective-noun words), values 7-digit numbers (RULER's default) or
3-syllable pseudo-words (`values: words`). Units are filler words. The relevant needle (the first asked key's
first value) sits after round(depth x units) filler words; every other needle at a uniformly random point
(RULER samples the distractors' depths too). The answer lists the asked keys' values, key by key in the order
asked, each key's values in their order in the text, joined by ", " (RULER scores any order by recall; exact
match needs one order, and this one is readable off the text).

Prompts: `short` (default: small models of 64-1,024 tokens) `Bako is 1234567.` ... `What is Bako? Bako is`
(` 1234567`), several values `What are all values of Bako, Tefu? They are` (` 1234567, 7654321`); `full` is
RULER's template ("Some special magic numbers are hidden within the following text...", "One of the special
magic numbers for bako is: 1234567.", "What are all the special magic numbers for bako mentioned in the
provided text? The special magic numbers for bako mentioned in the provided text are").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from posbench.data.tasks.long_context import (
    LongContextTask,
    distinct_numbers,
    distinct_words,
    interleave,
    longest_word_bytes,
    permutations,
    text_example,
)
from posbench.data.tasks.task import TASKS, Example, require

KEY_SYLLABLES, WORD_VALUE_SYLLABLES = 2, 3


class RulerNiah(LongContextTask):
    uses_filler = True

    @dataclass
    class Config(LongContextTask.Config):
        n_keys: int = 1  # needles with different keys (the ones not asked are distractors)
        n_values: int = 1  # values per key
        n_queries: int = 1  # keys asked
        values: Literal["numbers", "words"] = "numbers"
        value_digits: int = 7
        prompt: Literal["full", "short"] = "short"

        def check(self) -> None:
            super().check()
            require(1 <= self.n_keys <= 16 and 1 <= self.n_values <= 16,
                    f"task `{self.name}`: n_keys={self.n_keys} and n_values={self.n_values} must be in [1, 16]")
            require(1 <= self.n_queries <= self.n_keys,
                    f"task `{self.name}`: n_queries={self.n_queries} must be in [1, n_keys={self.n_keys}]")
            require(1 <= self.value_digits <= 18,
                    f"task `{self.name}`: value_digits={self.value_digits} must be in [1, 18]")

    def kind(self) -> str:
        return "numbers" if self.cfg.values == "numbers" else "words"

    def draw_values(self, rng: np.random.Generator, n: int, keys: list[str]) -> list[str]:
        if self.cfg.values == "numbers":
            return distinct_numbers(rng, n, self.cfg.value_digits)
        return distinct_words(rng, n, WORD_VALUE_SYLLABLES, avoid=set(keys))

    def value_space(self) -> int:
        return 9 * 10 ** (self.cfg.value_digits - 1) if self.cfg.values == "numbers" else 70**WORD_VALUE_SYLLABLES

    def render(self, rng: np.random.Generator, units: int, depth: float) -> Example:
        c = self.cfg
        keys = [k.capitalize() for k in distinct_words(rng, c.n_keys, KEY_SYLLABLES)]
        flat = self.draw_values(rng, c.n_keys * c.n_values, keys)
        values = {k: flat[i * c.n_values:(i + 1) * c.n_values] for i, k in enumerate(keys)}
        asked = keys[:c.n_queries]
        needles = [(k, v) for k in keys for v in values[k]]  # needles[0]: the relevant one
        at = [round(depth * units)] + [int(p) for p in rng.integers(0, units + 1, size=len(needles) - 1)]
        # by insertion point; the relevant needle first where points coincide, so its depth is exact
        order = sorted(range(len(needles)), key=lambda i: (at[i], i))
        words = self.filler.words(rng, units)  # drawn last: the plan does not depend on the filler
        text = interleave(words, [(at[i], self.needle(*needles[i])) for i in order])
        in_text = [needles[i] for i in order]
        answer = [v for k in asked for kk, v in in_text if kk == k]
        n_answer = len(answer)
        info = {"units": units, "depth": at[0] / max(1, units), "keys": keys, "asked": asked,
                "needle_points": {f"{k}={v}": at[i] for i, (k, v) in enumerate(needles)},
                "chance": float(self.value_space()) ** -n_answer,
                "guess": 1 / permutations(len(needles), n_answer)}
        return text_example(self.intro() + text + " " + self.question(asked), " " + ", ".join(answer), info)

    # -- wording ---------------------------------------------------------------------------------------------
    def needle(self, key: str, value: str) -> str:
        if self.cfg.prompt == "short":
            return f"{key} is {value}."
        return f"One of the special magic {self.kind()} for {key.lower()} is: {value}."

    def intro(self) -> str:
        if self.cfg.prompt == "short":
            return ""
        kind = self.kind()
        return (f"Some special magic {kind} are hidden within the following text. Make sure to memorize it. "
                f"I will quiz you about the {kind} afterwards. ")

    def question(self, asked: list[str]) -> str:
        c = self.cfg
        if c.prompt == "short":
            if c.n_queries == 1 and c.n_values == 1:
                return f"What is {asked[0]}? {asked[0]} is"
            return f"What are all values of {', '.join(asked)}? They are"
        keys, kind = ", ".join(k.lower() for k in asked), self.kind()
        return (f"What are all the special magic {kind} for {keys} mentioned in the provided text? "
                f"The special magic {kind} for {keys} mentioned in the provided text are")

    def fixed_bytes(self) -> int:
        c = self.cfg
        value = c.value_digits if c.values == "numbers" else 2 * WORD_VALUE_SYLLABLES
        needle = 60 + 2 * KEY_SYLLABLES + value  # the full wording's needle, with room
        return 260 + c.n_keys * c.n_values * (needle + 1) + c.n_queries * (2 * KEY_SYLLABLES + 4) \
            + c.n_queries * c.n_values * (value + 2)

    def unit_bytes(self) -> int:
        return longest_word_bytes(self.filler)


@TASKS.register("niah_single")
class NiahSingle(RulerNiah):
    summary = "RULER single needle: one key's value hidden in filler text"


@TASKS.register("niah_multikey")
class NiahMultiKey(RulerNiah):
    summary = "RULER multi-key needle: one key asked among distractor needles with other keys"

    @dataclass
    class Config(RulerNiah.Config):
        n_keys: int = 4


@TASKS.register("niah_multivalue")
class NiahMultiValue(RulerNiah):
    summary = "RULER multi-value needle: every value of one key, hidden as separate needles"

    @dataclass
    class Config(RulerNiah.Config):
        n_values: int = 4


@TASKS.register("niah_multiquery")
class NiahMultiQuery(RulerNiah):
    summary = "RULER multi-query needle: the values of several keys asked at once"

    @dataclass
    class Config(RulerNiah.Config):
        n_keys: int = 4
        n_queries: int = 4
