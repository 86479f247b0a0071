"""sort: numbers (repeats allowed), then the same numbers in ascending order. ID 3-6 numbers, OOD 7-10.
Each number 0..n_symbols-1 is one token.

    tokens  5 3 9 <sep> 3 5 9 <end>      text  "Sort the numbers: 5 3 9 ->" + " 3 5 9"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from posbench.data.tasks.task import TASKS
from posbench.data.tasks.transform import SequenceTransform, TransformConfig


@TASKS.register("sort")
class Sort(SequenceTransform):
    summary = "sort a list of small numbers ascending"
    instruction = "Sort the"
    noun = "numbers"

    @dataclass
    class Config(TransformConfig):
        id_range: tuple[int, int] = (3, 6)  # numbers
        ood_range: tuple[int, int] = (7, 10)
        n_symbols: int = 10  # values 0..9
        max_symbols: ClassVar[int] = 1000

    def symbols(self) -> list[str]:
        return [str(v) for v in range(self.cfg.n_symbols)]

    def transform(self, xs: list[str]) -> list[str]:
        return sorted(xs, key=lambda x: (0, int(x), "") if x.isdigit() else (1, 0, x))  # numbers by value
