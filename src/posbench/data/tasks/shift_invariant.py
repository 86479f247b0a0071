"""shift_invariant: does a fixed pattern (default "c a b") occur anywhere in the sequence? One yes/no
label per sequence, the target at the last position.

    tokens  a c a b d     targets  - - - - yes        text  "Does c a b occur in: a c a b d ->" + " yes"

Per-sequence rather than per-position labels: the question is whether the detector works at every
offset (the property relative PEs give for free), and one label per sequence makes accuracy and its 0.5
chance level directly comparable across lengths. Balanced: a fair coin picks the label; positives get
the pattern at a uniform offset (other occurrences may exist), negatives are redrawn until no occurrence
is left. OOD = longer sequences (defaults: ID 8-16 items, OOD 17-32).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

from posbench.data.tasks.task import IGNORE, TASKS, Example, label_rows, require, uniform_int
from posbench.data.tasks.yes_no import YesNoConfig, YesNoTask

_MAX_REDRAWS = 1000


def occurs(pattern: list[int], xs: list[int]) -> bool:
    m = len(pattern)
    return any(xs[i:i + m] == pattern for i in range(len(xs) - m + 1))


@TASKS.register("shift_invariant")
class ShiftInvariant(YesNoTask):
    summary = "does a fixed pattern occur anywhere in the sequence"

    @dataclass
    class Config(YesNoConfig):
        n_symbols: int = 8  # letters a..h
        pattern: str = "cab"  # letters among the first n_symbols

        def check(self) -> None:
            letters = string.ascii_lowercase[: self.n_symbols]
            super().check()
            require(len(self.pattern) >= 2 and set(self.pattern) <= set(letters),
                    f"task `{self.name}`: pattern={self.pattern!r} needs >= 2 letters among {letters!r}")
            require(len(self.pattern) <= self.id_range[0],
                    f"task `{self.name}`: pattern {self.pattern!r} is longer than the shortest sequence "
                    f"(id_range starts at {self.id_range[0]})")
            require(self.n_symbols ** len(self.pattern) >= 4 * self.ood_range[1],
                    f"task `{self.name}`: pattern {self.pattern!r} over {self.n_symbols} symbols occurs by chance "
                    f"in most sequences of {self.ood_range[1]}; use a longer pattern or more symbols")

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        n, m = uniform_int(rng, self.cfg.split_range(split)), self.cfg.n_symbols
        pattern = [string.ascii_lowercase.index(c) for c in self.cfg.pattern]
        present = bool(rng.integers(2))
        for _ in range(_MAX_REDRAWS):
            xs = [int(v) for v in rng.integers(m, size=n)]
            if present:
                at = int(rng.integers(n - len(pattern) + 1))
                xs[at:at + len(pattern)] = pattern
                break
            if not occurs(pattern, xs):
                break
        else:
            raise RuntimeError(f"shift_invariant: no sequence of {n} without {self.cfg.pattern!r} "
                               f"in {_MAX_REDRAWS} draws")
        items = [string.ascii_lowercase[v] for v in xs]
        labels = [IGNORE] * (n - 1) + [self.label_id(present)]
        tokens, targets = label_rows(self.vocab.ids(items), labels)
        prompt = f"Does {' '.join(self.cfg.pattern)} occur in: {' '.join(items)} ->"
        return Example(prompt, " yes" if present else " no", tokens, targets, {"length": n, "label": present})
