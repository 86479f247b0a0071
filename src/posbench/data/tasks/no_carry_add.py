"""no_carry_add: add several numbers whose digits never carry. ID 2-5 numbers, OOD 6-8 (issue 5).

    tokens  1 2 + 3 0 5 = 3 1 7 <end>       text  "12 + 305 =" + " 317"

Every column's digits sum to at most 9, so each answer digit depends only on its own column: the model
must align digits by place value, with no carry chain to learn. Per column the digit total is uniform in
0..9 and split uniformly over the numbers (stars and bars), so numbers of any count are possible; numbers
are written without leading zeros (their own length says where each column is).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posbench.data.tasks.base import Example, Task, TaskConfig, Vocab, answer_rows, register_task, require, uniform_int

DIGITS = [str(d) for d in range(10)]
PLUS, EQ, END = "+", "=", "<end>"


@register_task("no_carry_add")
class NoCarryAdd(Task):
    summary = "add 2-8 numbers whose column sums never carry"

    @dataclass
    class Config(TaskConfig):
        name: str = "no_carry_add"
        id_range: tuple[int, int] = (2, 5)  # how many numbers
        ood_range: tuple[int, int] = (6, 8)
        digits: int = 3  # columns per number

        def check(self) -> None:
            require(self.id_range[0] >= 2, f"task `{self.name}`: id_range must start at >= 2 numbers")
            require(1 <= self.digits <= 12, f"task `{self.name}`: digits={self.digits} must be in [1, 12]")

    def build_vocab(self) -> Vocab:
        return Vocab(DIGITS, [PLUS, EQ, END])

    def max_tokens(self, split: str) -> int:
        k, d = self.cfg.split_range(split)[1], self.cfg.digits
        return k * d + (k - 1) + 1 + d + 1

    @property
    def chance_accuracy(self) -> float:
        return 1 / 10

    def column(self, rng: np.random.Generator, k: int) -> np.ndarray:
        """k digits summing to a total uniform in 0..9, every split of that total equally likely."""
        total = int(rng.integers(10))
        cuts = np.sort(rng.choice(total + k - 1, size=k - 1, replace=False))
        bounds = np.concatenate([[-1], cuts, [total + k - 1]])
        return np.diff(bounds) - 1

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        k = uniform_int(rng, self.cfg.split_range(split))
        cols_DK = np.stack([self.column(rng, k) for _ in range(self.cfg.digits)])  # row 0 = units
        numbers = [int(sum(int(cols_DK[p, j]) * 10**p for p in range(self.cfg.digits))) for j in range(k)]
        answer = str(sum(numbers))
        prompt_syms = list(PLUS.join(str(n) for n in numbers)) + [EQ]
        tokens, targets = answer_rows(self.vocab.ids(prompt_syms), self.vocab.ids(list(answer) + [END]))
        return Example(" + ".join(map(str, numbers)) + " =", " " + answer, tokens, targets,
                       {"numbers": k, "digits": self.cfg.digits})
