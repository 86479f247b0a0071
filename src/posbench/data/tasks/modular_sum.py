"""modular_sum: at every position, the sum of all previous numbers mod `base` (the project's
specification: [3, 1, 4] -> [0, 3, 4]). A labelling task: the target at item t is a number token, sum(x_0..x_{t-1}).

    tokens  3 1 4           targets  0 3 4          text  "... of: 3 1 4 ->" + " 0 3 4"

The target leaves the current item out (it is the running state *before* t), exactly as the specification
states; the current item is still visible to the model, so this is the same difficulty as the inclusive
sum shifted by one. OOD = longer sequences (defaults: ID 8-16 items, OOD 17-32).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posbench.data.tasks.task import TASKS, Example, Task, TaskConfig, Vocab, label_rows, require, uniform_int


@TASKS.register("modular_sum")
class ModularSum(Task):
    summary = "running sum mod a base of the numbers before each position"

    @dataclass
    class Config(TaskConfig):
        id_range: tuple[int, int] = (8, 16)  # items
        ood_range: tuple[int, int] = (17, 32)
        base: int = 10  # item values and sums are 0..base-1

        def check(self) -> None:
            super().check()
            require(2 <= self.base <= 1000, f"task `{self.name}`: base={self.base} must be in [2, 1000]")

    def build_vocab(self) -> Vocab:
        return Vocab([str(v) for v in range(self.cfg.base)])

    def max_tokens(self, split: str) -> int:
        return self.cfg.split_range(split)[1]

    @property
    def chance_accuracy(self) -> float:
        return 1 / self.cfg.base

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        n = uniform_int(rng, self.cfg.split_range(split))
        xs = rng.integers(self.cfg.base, size=n)
        sums = (np.cumsum(xs) - xs) % self.cfg.base  # exclusive prefix sums
        items, labels = [str(int(v)) for v in xs], [str(int(v)) for v in sums]
        tokens, targets = label_rows(self.vocab.ids(items), self.vocab.ids(labels))
        prompt = f"Running sum mod {self.cfg.base} of the numbers before each of: {' '.join(items)} ->"
        return Example(prompt, " " + " ".join(labels), tokens, targets, {"length": n})
