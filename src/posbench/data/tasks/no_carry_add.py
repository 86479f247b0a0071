"""no_carry_add: add several numbers whose digits never carry. ID 2-5 numbers, OOD 6-8.

    tokens  1 2 + 3 0 5 = 3 1 7 <end>       text  "12 + 305 =" + " 317"

Every column's digits sum to at most 9, so each answer digit depends only on its own column: the model
must align digits by place value, with no carry chain to learn. Per column the digit total is uniform in
0..9 and split uniformly over the numbers (stars and bars), so numbers of any count are possible; numbers
are written without leading zeros (their own length says where each column is).

`format: reference` is the reference framework's form: always two numbers, each of a digit count drawn
from the split's range (ID 2-5 digits), no column summing past 9, written `add: 12+305=` + `317`; the
ranges then count digits per number. The token form is the same as ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from posbench.data.tasks.task import TASKS, Example, Task, TaskConfig, Vocab, answer_rows, require, uniform_int

DIGITS = [str(d) for d in range(10)]
PLUS, EQ, END = "+", "=", "<end>"


@TASKS.register("no_carry_add")
class NoCarryAdd(Task):
    summary = "add 2-8 numbers whose column sums never carry"

    @dataclass
    class Config(TaskConfig):
        id_range: tuple[int, int] = (2, 5)  # how many numbers
        ood_range: tuple[int, int] = (6, 8)
        digits: int = 3  # columns per number
        format: Literal["ours", "reference"] = "ours"  # reference: two numbers of id_range digits, `add: a+b=`
        new_option_defaults: ClassVar[dict] = {"format": "ours"}

        def check(self) -> None:
            super().check()
            require(self.id_range[0] >= 2, f"task `{self.name}`: id_range must start at >= 2 numbers")
            require(1 <= self.digits <= 12, f"task `{self.name}`: digits={self.digits} must be in [1, 12]")

    def build_vocab(self) -> Vocab:
        return Vocab(DIGITS, [PLUS, EQ, END])

    def max_tokens(self, split: str) -> int:
        k, d = self.cfg.split_range(split)[1], self.cfg.digits
        if self.cfg.format == "reference":
            k, d = 2, self.cfg.split_range(split)[1]
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

    def two_numbers(self, rng: np.random.Generator, lengths: tuple[int, int]) -> list[int]:
        """Two numbers of the given digit counts, no leading zeros, no column summing past 9: each column's
        pair drawn uniformly among the pairs allowed there."""
        numbers = [0, 0]
        for p in range(max(lengths)):
            while True:
                pair = [int(rng.integers(10)) if p < n else 0 for n in lengths]
                leading_zero = any(p == n - 1 and d == 0 for n, d in zip(lengths, pair))
                if sum(pair) <= 9 and not leading_zero:
                    break
            numbers = [x + d * 10**p for x, d in zip(numbers, pair)]
        return numbers

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        if self.cfg.format == "reference":
            r = self.cfg.split_range(split)
            a, b = self.two_numbers(rng, (uniform_int(rng, r), uniform_int(rng, r)))
            tokens, targets = answer_rows(self.vocab.ids([*str(a), PLUS, *str(b), EQ]),
                                          self.vocab.ids([*str(a + b), END]))
            return Example(f"add: {a}+{b}=", str(a + b), tokens, targets, {"numbers": 2, "digits": max(len(str(a)),
                                                                                                      len(str(b)))})
        k = uniform_int(rng, self.cfg.split_range(split))
        cols_DK = np.stack([self.column(rng, k) for _ in range(self.cfg.digits)])  # row 0 = units
        numbers = [int(sum(int(cols_DK[p, j]) * 10**p for p in range(self.cfg.digits))) for j in range(k)]
        answer = str(sum(numbers))
        prompt_syms = list(PLUS.join(str(n) for n in numbers)) + [EQ]
        tokens, targets = answer_rows(self.vocab.ids(prompt_syms), self.vocab.ids(list(answer) + [END]))
        return Example(" + ".join(map(str, numbers)) + " =", " " + answer, tokens, targets,
                       {"numbers": k, "digits": self.cfg.digits})
