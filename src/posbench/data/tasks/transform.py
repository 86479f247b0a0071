"""Shared shape of the string-to-string tasks (reverse, simple_copy, sort): items, <sep>, transformed items.

    tokens  x1 .. xn <sep> y1 .. yn <end>     targets: next token over y1 .. yn <end>, IGNORE elsewhere
    text    "<instruction>: x1 .. xn ->" + " y1 .. yn"

A task file declares its symbols, its instruction and `transform`; the length ranges count items n.

Options for the reference framework's formats (configs/data/mix_reference.yaml):
  alphabet  own (the task's symbols: letters, or sort's numbers) | letters | digits | letters_or_digits
            (each example letters or digits, 50/50; the noun in the instruction follows: "Copy the digits")
  unique    items drawn without repeats (the reference's sort), so n may not exceed the alphabet
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from posbench.data.tasks.task import Example, Task, TaskConfig, Vocab, answer_rows, require, uniform_int

SEP, END = "<sep>", "<end>"
ALPHABETS = {"letters": list(string.ascii_lowercase), "digits": list(string.digits)}


@dataclass
class TransformConfig(TaskConfig):
    n_symbols: int = 26  # size of the task's own alphabet (alphabet=own)
    alphabet: Literal["own", "letters", "digits", "letters_or_digits"] = "own"
    unique: bool = False
    max_symbols: ClassVar[int] = 26
    new_option_defaults: ClassVar[dict] = {"alphabet": "own", "unique": False}

    def check(self) -> None:
        super().check()
        require(2 <= self.n_symbols <= self.max_symbols,
                f"task `{self.name}`: n_symbols={self.n_symbols} must be in [2, {self.max_symbols}]")
        if self.unique:
            smallest = {"own": self.n_symbols, "letters": 26, "digits": 10, "letters_or_digits": 10}[self.alphabet]
            require(self.ood_range[1] <= smallest,
                    f"task `{self.name}`: unique items need ood_range up to {smallest} (alphabet {self.alphabet})")


class SequenceTransform(Task):
    instruction: ClassVar[str] = ""  # e.g. "Copy the", followed by the noun of the alphabet
    noun: ClassVar[str] = "letters"  # of the task's own alphabet

    def symbols(self) -> list[str]:
        """The task's own alphabet."""
        raise NotImplementedError

    def alphabets(self) -> list[tuple[str, list[str]]]:
        """(noun, symbols) of the alphabets an example may use, each equally likely."""
        choice = self.cfg.alphabet
        if choice == "own":
            return [(self.noun, self.symbols())]
        names = ["letters", "digits"] if choice == "letters_or_digits" else [choice]
        return [(name, ALPHABETS[name]) for name in names]

    def transform(self, xs: list[str]) -> list[str]:
        raise NotImplementedError

    def build_vocab(self) -> Vocab:
        return Vocab([x for _, symbols in self.alphabets() for x in symbols], [SEP, END])

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
        alphabets = self.alphabets()
        # a draw only when there is a choice: a single alphabet consumes no randomness, so adding the option left
        # the default examples' random stream (and the published results on them) unchanged
        noun, symbols = alphabets[int(rng.integers(len(alphabets)))] if len(alphabets) > 1 else alphabets[0]
        k = len(symbols)
        picks = rng.choice(k, size=n, replace=False) if self.cfg.unique else rng.integers(k, size=n)
        xs = [symbols[i] for i in picks]
        ys = self.transform(xs)
        tokens, targets = answer_rows(self.vocab.ids(xs + [SEP]), self.vocab.ids(ys + [END]))
        return Example(f"{self.instruction} {noun}: {' '.join(xs)} ->", " " + " ".join(ys), tokens, targets,
                       {"length": n, "alphabet": noun})
