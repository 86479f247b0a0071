"""Shared shape of the string-to-string tasks (reverse, simple_copy, sort): items, <sep>, transformed items.

    tokens  x1 .. xn <sep> y1 .. yn <end>     targets: next token over y1 .. yn <end>, IGNORE elsewhere
    text    "<instruction>: x1 .. xn ->" + " y1 .. yn"

A task file declares its symbols, its instruction and `transform`; the length ranges count items n.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from posbench.data.tasks.base import Example, Task, TaskConfig, Vocab, answer_rows, require, uniform_int

SEP, END = "<sep>", "<end>"


@dataclass
class TransformConfig(TaskConfig):
    n_symbols: int = 26
    max_symbols: ClassVar[int] = 26

    def check(self) -> None:
        require(2 <= self.n_symbols <= self.max_symbols,
                f"task `{self.name}`: n_symbols={self.n_symbols} must be in [2, {self.max_symbols}]")


class SequenceTransform(Task):
    instruction: ClassVar[str] = ""

    def symbols(self) -> list[str]:
        raise NotImplementedError

    def transform(self, xs: list[str]) -> list[str]:
        raise NotImplementedError

    def build_vocab(self) -> Vocab:
        return Vocab(self.symbols(), [SEP, END])

    @property
    def source_end_token(self) -> int:
        return self.vocab.id(SEP)

    def max_tokens(self, split: str) -> int:
        return 2 * self.cfg.split_range(split)[1] + 2

    @property
    def chance_accuracy(self) -> float:
        return 1 / self.cfg.n_symbols

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        n = uniform_int(rng, self.cfg.split_range(split))
        symbols = self.symbols()
        xs = [symbols[i] for i in rng.integers(len(symbols), size=n)]
        ys = self.transform(xs)
        tokens, targets = answer_rows(self.vocab.ids(xs + [SEP]), self.vocab.ids(ys + [END]))
        return Example(f"{self.instruction}: {' '.join(xs)} ->", " " + " ".join(ys), tokens, targets,
                       {"length": n})
