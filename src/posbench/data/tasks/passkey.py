"""passkey: a 5-digit key hidden in filler, asked for at the end (Mohtashami & Jaggi 2023, "Landmark
Attention", section 4.2; the prompt follows theirs).

    tokens  f.. <key> 1 2 3 4 5 f.. <ask> 1 2 3 4 5 <end>      f: one of 8 filler symbols
    text    INTRO filler "The pass key is 12345. Remember it. 12345 is the pass key." filler
            "What is the pass key? The pass key is" + " 12345"

The distance (filler units between the key and the question) is a fraction of the room `context` leaves
for filler after the fixed tokens: ID 0.25-1.0, OOD 1.5-2.0, so ID examples fit in `context`
tokens and OOD ones run to twice that. One unit is one filler token, or one filler word in the text
(the classic "The grass is green..." haystack unless a filler is given). `example_at` places a key at
any distance for the passkey evaluator's length x depth grid. `min_key_digits` > 0 draws the key's length
uniformly from min_key_digits..key_digits (the reference framework's 1-5 digit codes). `prompt: short` drops
the instruction and the repetitions (text `... The pass key is 12345. ...` + `The pass key is` + " 12345"),
so a haystack of a short-context model's training length can hold it; the token form is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from posbench.data.tasks.filler import Filler, cut_points, garden_filler
from posbench.data.tasks.gap import GapConfig, GapTask, sample_gap
from posbench.data.tasks.task import TASKS, Example, Vocab, answer_rows, require

DIGITS = [str(d) for d in range(10)]
FILL = [f"<f{i}>" for i in range(8)]
KEY, ASK, END = "<key>", "<ask>", "<end>"
INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
         "I will quiz you about the important information there.")


@TASKS.register("passkey")
class Passkey(GapTask):
    summary = "retrieve a numeric pass key from far back in filler text"
    uses_filler = True

    @dataclass
    class Config(GapConfig):  # distance: key to question
        key_digits: int = 5
        min_key_digits: int = 0  # 0: every key has key_digits digits
        prompt: Literal["full", "short"] = "full"  # short: no instruction, fact and question said once
        new_option_defaults: ClassVar[dict] = {"min_key_digits": 0, "prompt": "full"}

        def fixed_tokens(self) -> int:
            return 2 * self.key_digits + 3  # <key> digits <ask> digits <end>

        def check(self) -> None:
            require(1 <= self.key_digits <= 18, f"task `{self.name}`: key_digits={self.key_digits} must be in [1, 18]")
            require(0 <= self.min_key_digits <= self.key_digits,
                    f"task `{self.name}`: min_key_digits={self.min_key_digits} must be in [0, key_digits]")
            super().check()

    def default_filler(self) -> Filler:
        return garden_filler()

    def build_vocab(self) -> Vocab:
        return Vocab(DIGITS, FILL, [KEY, ASK, END])

    @property
    def chance_accuracy(self) -> float:
        return 1 / 10

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        prefix, gap = sample_gap(rng, self.cfg.split_range(split), self.room)
        return self.render(rng, prefix, gap)

    def example_at(self, seed: int, index: int, distance: int, prefix: int = 0, split: str = "id") -> Example:
        """A key `distance` filler units before the question, after `prefix` units of filler."""
        if distance < 0 or prefix < 0:
            raise ValueError(f"distance and prefix must be >= 0, got {distance}, {prefix}")
        return self.keep_split(lambda rng: self.render(rng, prefix, distance), seed, index, split)

    def render(self, rng: np.random.Generator, prefix: int, gap: int) -> Example:
        d = self.cfg.key_digits
        if self.cfg.min_key_digits:  # drawn only with the option, so default examples are unchanged
            d = int(rng.integers(self.cfg.min_key_digits, self.cfg.key_digits + 1))
        key = str(int(rng.integers(10 ** (d - 1), 10**d)))
        fill = [FILL[i] for i in rng.integers(len(FILL), size=prefix + gap)]
        tokens, targets = answer_rows(self.vocab.ids(fill[:prefix] + [KEY, *key] + fill[prefix:] + [ASK]),
                                      self.vocab.ids([*key, END]))
        # Text filler is drawn last, so the plan and the token form do not depend on which filler is used.
        words = self.filler.words(rng, prefix + gap)
        a, b = cut_points(words, prefix, prefix + gap)
        if self.cfg.prompt == "short":
            intro, fact, question = [], f"The pass key is {key}.", "The pass key is"
        else:
            intro, fact = [INTRO], f"The pass key is {key}. Remember it. {key} is the pass key."
            question = "What is the pass key? The pass key is"
        parts = [*intro, *words[:a], fact, *words[a:b], question]
        info = {"distance": gap, "prefix": prefix, "room": self.room, "fraction": gap / self.room,
                "depth": prefix / max(1, prefix + gap), "text_distance": b - a}
        return Example(" ".join(parts), " " + key, tokens, targets, info)
