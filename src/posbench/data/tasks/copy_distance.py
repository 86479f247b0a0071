"""copy_distance: copy a short letter string seen `distance` tokens earlier, across random letters.

    tokens  r.. <copy> p1..p6 r.. <paste> p1..p6 <end>         r, p: letters of the same alphabet
    text    "r .. [ p1 .. p6 ] r .. Repeat the letters in brackets:" + " p1 .. p6"

Unlike passkey the gap is made of the same symbols as the payload, so only the <copy> marker tells where
the string is and every filler letter is a plausible distractor. The distance (units between the end of
the payload and <paste>) is a fraction of the room `context` leaves after the fixed tokens: ID 0.25-1.0,
OOD 1.5-2.0 (the project's task ranges). One unit is one letter in both forms.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

from posbench.data.tasks.gap import GapConfig, GapTask, sample_gap
from posbench.data.tasks.task import TASKS, Example, Vocab, answer_rows, require

COPY, PASTE, END = "<copy>", "<paste>", "<end>"


@TASKS.register("copy_distance")
class CopyDistance(GapTask):
    summary = "copy a marked letter string across a long gap of random letters"

    @dataclass
    class Config(GapConfig):  # distance: payload to <paste>
        payload: int = 6  # letters to copy
        n_symbols: int = 16  # letters a..p, for payload and filler alike

        def fixed_tokens(self) -> int:
            return 2 * self.payload + 3  # <copy> payload <paste> payload <end>

        def check(self) -> None:
            require(self.payload >= 1, f"task `{self.name}`: payload={self.payload} must be >= 1")
            require(2 <= self.n_symbols <= 26, f"task `{self.name}`: n_symbols={self.n_symbols} must be in [2, 26]")
            super().check()

    def build_vocab(self) -> Vocab:
        return Vocab(string.ascii_lowercase[: self.cfg.n_symbols], [COPY, PASTE, END])

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
