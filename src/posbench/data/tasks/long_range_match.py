"""long_range_match: is the last item equal to the first? One yes/no target, at the last position, so
the answer needs information from the far end of the sequence.

    tokens  c a d b c     targets  - - - - yes        text  "... c a d b c ->" + " yes"

Balanced: a fair coin picks the label, then the last item copies the first (yes) or is drawn from the
other symbols (no); the middle is uniform. OOD = longer sequences (defaults: ID 8-16 items, OOD 17-32).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from posbench.data.tasks.task import IGNORE, TASKS, Example, label_rows, uniform_int
from posbench.data.tasks.yes_no import YesNoConfig, YesNoTask


@TASKS.register("long_range_match")
class LongRangeMatch(YesNoTask):
    summary = "does the last item equal the first"

    @dataclass
    class Config(YesNoConfig):
        n_symbols: int = 8  # letters a..h
        range_min: ClassVar[int] = 2  # a first and a distinct last item

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        n, m = uniform_int(rng, self.cfg.split_range(split)), self.cfg.n_symbols
        xs = [int(v) for v in rng.integers(m, size=n)]
        same = bool(rng.integers(2))
        xs[-1] = xs[0] if same else (xs[0] + 1 + int(rng.integers(m - 1))) % m
        items = [string.ascii_lowercase[v] for v in xs]
        labels = [IGNORE] * (n - 1) + [self.label_id(same)]
        tokens, targets = label_rows(self.vocab.ids(items), labels)
        prompt = f"Is the last letter the same as the first? {' '.join(items)} ->"
        return Example(prompt, " yes" if same else " no", tokens, targets, {"length": n, "label": same})
