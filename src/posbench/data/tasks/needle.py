"""needle: one fact sentence at a given depth of filler text, asked for at the end (Kamradt 2023,
"needle in a haystack"; the key -> 7-digit value form of RULER's single needle, Hsieh et al. 2024).

    tokens  f.. <fact> K 1 2 3 4 5 6 7 f.. <ask> K 1 2 3 4 5 6 7 <end>     K: one of 16 key symbols
    text    filler "The special magic number for Oslo is 1234567." filler
            "What is the special magic number for Oslo? The special magic number for Oslo is" + " 1234567"

Filler length in units (filler tokens, or filler words in the text): ID 64-256, OOD 512-1024 by default;
the depth (share of the filler before the fact) is uniform in [0, 1]. The filler is the generated one
unless a Filler is given (e.g. text decoded from the corpus's filler shards). `example_at(seed, index,
filler_len, depth)` builds the cells of the NIAH length x depth heatmap. `prompt: short` says the fact and the
question in fewer words (`The magic number for Oslo is 1234567.` ... `The magic number for Oslo is`), so a
haystack of a short-context model's training length can hold them; the token form is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from posbench.data.tasks.filler import cut_points
from posbench.data.tasks.task import TASKS, Example, Task, TaskConfig, Vocab, answer_rows, require, uniform_int

DIGITS = [str(d) for d in range(10)]
FILL = [f"<f{i}>" for i in range(8)]
KEYS = ["Oslo", "Lima", "Cairo", "Dublin", "Hanoi", "Quito", "Riga", "Accra", "Bern", "Doha", "Kyiv", "Lagos",
        "Manila", "Nairobi", "Sofia", "Tunis"]
FACT, ASK, END = "<fact>", "<ask>", "<end>"


@TASKS.register("needle")
class Needle(Task):
    summary = "retrieve a key's value from a fact sentence at some depth of filler text"
    uses_filler = True

    @dataclass
    class Config(TaskConfig):
        id_range: tuple[int, int] = (64, 256)  # filler units
        ood_range: tuple[int, int] = (512, 1024)
        value_digits: int = 7
        prompt: Literal["full", "short"] = "full"  # short: the fact and the question in fewer words
        new_option_defaults: ClassVar[dict] = {"prompt": "full"}

        def check(self) -> None:
            super().check()
            require(1 <= self.value_digits <= 18,
                    f"task `{self.name}`: value_digits={self.value_digits} must be in [1, 18]")

    def build_vocab(self) -> Vocab:
        return Vocab(DIGITS, FILL, KEYS, [FACT, ASK, END])

    def max_tokens(self, split: str) -> int:
        return self.cfg.split_range(split)[1] + 2 * self.cfg.value_digits + 5

    @property
    def chance_accuracy(self) -> float:
        return 1 / 10

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        n = uniform_int(rng, self.cfg.split_range(split))
        return self.render(rng, n, float(rng.random()))

    def example_at(self, seed: int, index: int, filler_len: int, depth: float, split: str = "id") -> Example:
        """The fact after round(depth * filler_len) of filler_len filler units."""
        if filler_len < 0 or not 0.0 <= depth <= 1.0:
            raise ValueError(f"need filler_len >= 0 and depth in [0, 1], got {filler_len}, {depth}")
        return self.keep_split(lambda rng: self.render(rng, filler_len, depth), seed, index, split)

    def render(self, rng: np.random.Generator, n: int, depth: float) -> Example:
        d, pre = self.cfg.value_digits, round(depth * n)
        key, value = KEYS[int(rng.integers(len(KEYS)))], str(int(rng.integers(10 ** (d - 1), 10**d)))
        fill = [FILL[i] for i in rng.integers(len(FILL), size=n)]
        tokens, targets = answer_rows(self.vocab.ids(fill[:pre] + [FACT, key, *value] + fill[pre:] + [ASK, key]),
                                      self.vocab.ids([*value, END]))
        # Text filler is drawn last, so the plan and the token form do not depend on which filler is used.
        words = self.filler.words(rng, n)
        a, b = cut_points(words, pre, n)
        if self.cfg.prompt == "short":
            fact, question = f"The magic number for {key} is {value}.", f"The magic number for {key} is"
        else:
            fact = f"The special magic number for {key} is {value}."
            question = f"What is the special magic number for {key}? The special magic number for {key} is"
        prompt = " ".join([*words[:a], fact, *words[a:b], question])
        return Example(prompt, " " + value, tokens, targets,
                       {"filler": n, "depth": pre / max(1, n), "key": key, "text_depth": a / max(1, b)})
