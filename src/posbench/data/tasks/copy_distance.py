"""copy_distance: copy a short letter string seen `distance` tokens earlier, across random letters.

    tokens  r.. <copy> p1..p6 r.. <paste> p1..p6 <end>         r, p: letters of the same alphabet
    text    "r .. [ p1 .. p6 ] r .. Repeat the letters in brackets:" + " p1 .. p6"

Unlike passkey the gap is made of the same symbols as the payload, so only the <copy> marker tells where
the string is and every filler letter is a plausible distractor. The distance (units between the end of
the payload and <paste>) is a fraction of the room `context` leaves after the fixed tokens: ID 0.25-1.0,
OOD 1.5-2.0 (issue 5). One unit is one letter in both forms.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from posbench.data.tasks.base import (
    TASKS,
    Example,
    Task,
    TaskConfig,
    Vocab,
    answer_rows,
    check_gap_config,
    gap_bounds,
    require,
    sample_gap,
)

COPY, PASTE, END = "<copy>", "<paste>", "<end>"


@TASKS.register("copy_distance")
class CopyDistance(Task):
    summary = "copy a marked letter string across a long gap of random letters"

    @dataclass
    class Config(TaskConfig):
        context: int = 256  # training context in task tokens: ID examples never exceed it
        id_range: tuple[float, float] = (0.25, 1.0)  # payload-to-paste distance / room for filler
        ood_range: tuple[float, float] = (1.5, 2.0)
        payload: int = 6  # letters to copy
        n_symbols: int = 16  # letters a..p, for payload and filler alike
        range_min: ClassVar[float] = 0.0  # fractions; check_gap_config wants a whole distance >= 1

        def check(self) -> None:
            require(self.payload >= 1, f"task `{self.name}`: payload={self.payload} must be >= 1")
            require(2 <= self.n_symbols <= 26, f"task `{self.name}`: n_symbols={self.n_symbols} must be in [2, 26]")
            check_gap_config(self, 2 * self.payload + 3)

    @property
    def room(self) -> int:
        return self.cfg.context - (2 * self.cfg.payload + 3)

    def build_vocab(self) -> Vocab:
        return Vocab(string.ascii_lowercase[: self.cfg.n_symbols], [COPY, PASTE, END])

    def max_tokens(self, split: str) -> int:
        return gap_bounds(self.cfg.split_range(split), self.room)[1] + 2 * self.cfg.payload + 3

    @property
    def chance_accuracy(self) -> float:
        return 1 / self.cfg.n_symbols

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        prefix, gap = sample_gap(rng, self.cfg.split_range(split), self.room)
        letters = string.ascii_lowercase[: self.cfg.n_symbols]
        payload = [letters[i] for i in rng.integers(len(letters), size=self.cfg.payload)]
        fill = [letters[i] for i in rng.integers(len(letters), size=prefix + gap)]
        tokens, targets = answer_rows(self.vocab.ids(fill[:prefix] + [COPY, *payload] + fill[prefix:] + [PASTE]),
                                      self.vocab.ids([*payload, END]))
        parts = [*fill[:prefix], "[", *payload, "]", *fill[prefix:], "Repeat the letters in brackets:"]
        info = {"distance": gap, "prefix": prefix, "room": self.room, "fraction": gap / self.room}
        return Example(" ".join(parts), " " + " ".join(payload), tokens, targets, info)
