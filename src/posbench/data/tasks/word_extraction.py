"""RULER's aggregation tasks (Hsieh et al. 2024, arXiv 2404.06654, section 3.1 "Aggregation"): the answer
depends on the whole context, so there is no depth axis.

common_words (RULER cwe): `n_common` words appear `freq_common` times each, `units` other words `freq_rare`
times each, shuffled into one list; name the common words. RULER's defaults are 10 words x 30 against x 3;
the defaults here (3 x 4 against x 1) fit a 128-token model. The answer lists the common words in the order
they first appear in the list (RULER scores any order by recall).

    text  "Words: sapo ki tefu sapo ... Which 3 words are most common? They are" + " sapo tefu lumi"

frequent_words (RULER fwe): `units` words drawn from a Zipf law (exponent `alpha`, RULER's 2.0) over
ranks n_answer + 1 .. n_answer + units of coded words; the `n_answer` answer words come on top, each more
frequent than every word below it:
rank r's count is max(m + n_answer - r + 1, round(m x ((n_answer + 1) / r)^alpha)), m the commonest drawn
word's count (the Zipf law continued upwards, and one answer only: RULER's sampling can tie). The answer
lists them commonest first. Words are pseudo-words (RULER: random letter strings for fwe, English for cwe).
`prompt: full` is RULER's wording (cwe: a numbered list, "What are the 10 most common words in the above
list? Answer: The top 10 words that appear most often in the list are:"; fwe: "Read the following coded text
and track the frequency of each coded word. ... Question: Do not provide any explanation. What are the three
most frequently appeared words in the above coded text? Answer: According to the coded text above, the three
most frequently appeared words are:"; RULER's dots between words are left out).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from math import comb
from typing import Literal

import numpy as np

from posbench.data.tasks.long_context import LongContextTask, distinct_words, permutations, text_example
from posbench.data.tasks.task import TASKS, Example, require

NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight",
                9: "nine", 10: "ten"}


@TASKS.register("common_words")
class CommonWords(LongContextTask):
    summary = "RULER common-word extraction: name the words that recur most in a list"
    depth_controlled = False

    @dataclass
    class Config(LongContextTask.Config):
        n_common: int = 3
        freq_common: int = 4
        freq_rare: int = 1
        syllables: int = 2
        prompt: Literal["full", "short"] = "short"

        def check(self) -> None:
            super().check()
            require(1 <= self.n_common <= 10, f"task `{self.name}`: n_common={self.n_common} must be in [1, 10]")
            require(1 <= self.freq_rare < self.freq_common,
                    f"task `{self.name}`: need 1 <= freq_rare < freq_common, got {self.freq_rare}, "
                    f"{self.freq_common} (the common words must be the most frequent)")
            require(2 <= self.syllables <= 4, f"task `{self.name}`: syllables={self.syllables} must be in [2, 4]")

    def render(self, rng: np.random.Generator, units: int, depth: float) -> Example:
        c = self.cfg
        vocab = distinct_words(rng, c.n_common + units, c.syllables)
        common, rare = vocab[:c.n_common], vocab[c.n_common:]
        items = common * c.freq_common + rare * c.freq_rare
        listed = [items[i] for i in rng.permutation(len(items))]
        first = {w: i for i, w in reversed(list(enumerate(listed)))}
        answer = sorted(common, key=first.__getitem__)
        if c.prompt == "short":
            body = "Words: " + " ".join(listed)
            question = f"Which {c.n_common} words are most common? They are"
        else:
            body = ("Below is a numbered list of words. In these words, some appear more often than others. "
                    "Memorize the ones that appear most often. "
                    + " ".join(f"{i + 1}. {w}" for i, w in enumerate(listed)))
            question = (f"Question: What are the {c.n_common} most common words in the above list? Answer: The top "
                        f"{c.n_common} words that appear most often in the list are:")
        n_distinct = c.n_common + units
        info = {"units": units, "counts": dict(Counter(listed)),
                "chance": 1 / permutations(70**c.syllables, c.n_common), "guess": 1 / comb(n_distinct, c.n_common)}
        return text_example(body + " " + question, " " + " ".join(answer), info)

    def fixed_bytes(self) -> int:
        c = self.cfg
        word = 2 * c.syllables + 1
        return 260 + c.n_common * c.freq_common * (word + 6) + c.n_common * word

    def unit_bytes(self) -> int:
        # a word (a syllable longer past half the pool: long_context.distinct_words), in `full` its list number
        return self.cfg.freq_rare * (2 * self.cfg.syllables + 9)


@TASKS.register("frequent_words")
class FrequentWords(LongContextTask):
    summary = "RULER frequent-word extraction: name the commonest words of Zipf-distributed coded text"
    depth_controlled = False

    @dataclass
    class Config(LongContextTask.Config):
        n_answer: int = 3
        alpha: float = 2.0
        syllables: int = 2
        prompt: Literal["full", "short"] = "short"

        def check(self) -> None:
            super().check()
            require(1 <= self.n_answer <= 10, f"task `{self.name}`: n_answer={self.n_answer} must be in [1, 10]")
            require(1.0 < self.alpha <= 4.0, f"task `{self.name}`: alpha={self.alpha} must be in (1, 4]")
            require(2 <= self.syllables <= 4, f"task `{self.name}`: syllables={self.syllables} must be in [2, 4]")

    def answer_counts(self, top_drawn: int) -> list[int]:
        """Counts of answer ranks 1..n_answer given the commonest drawn word's count (module docstring)."""
        n, a = self.cfg.n_answer, self.cfg.alpha
        return [max(top_drawn + n - r + 1, round(top_drawn * ((n + 1) / r) ** a)) for r in range(1, n + 1)]

    def render(self, rng: np.random.Generator, units: int, depth: float) -> Example:
        c = self.cfg
        vocab = distinct_words(rng, c.n_answer + max(units, 1), c.syllables)
        top, tail = vocab[:c.n_answer], vocab[c.n_answer:]
        p = 1.0 / np.arange(c.n_answer + 1, c.n_answer + len(tail) + 1) ** c.alpha  # overall ranks n+1, n+2, ...
        drawn = [tail[i] for i in rng.choice(len(tail), size=units, p=p / p.sum())]
        counts = self.answer_counts(max(Counter(drawn).values(), default=0))
        words = drawn + [w for w, k in zip(top, counts, strict=True) for _ in range(k)]
        words = [words[i] for i in rng.permutation(len(words))]
        n = NUMBER_WORDS[c.n_answer]
        if c.prompt == "short":
            body, question = "Text: " + " ".join(words), f"Which {c.n_answer} words are most frequent? They are"
        else:
            body = ("Read the following coded text and track the frequency of each coded word. Find the "
                    f"{n} most frequently appeared coded words. " + " ".join(words))
            question = (f"Question: Do not provide any explanation. What are the {n} "
                        f"most frequently appeared words in the above coded text? Answer: According to the coded "
                        f"text above, the {n} most frequently appeared words are:")
        n_distinct = len(set(words))
        info = {"units": units, "counts": dict(Counter(words)),
                "chance": 1 / permutations(70**c.syllables, c.n_answer),
                "guess": 1 / permutations(n_distinct, c.n_answer)}
        return text_example(body + " " + question, " " + " ".join(top), info)

    def fixed_bytes(self) -> int:
        c = self.cfg
        word = 2 * c.syllables + 1
        # the answer words' counts grow with the tail's commonest count, at most units * (n + 1)^alpha
        return 360 + c.n_answer * (word + 1)

    def unit_bytes(self) -> int:
        c = self.cfg
        return (2 * c.syllables + 3) * (1 + c.n_answer * int(np.ceil((c.n_answer + 1) ** c.alpha)))
