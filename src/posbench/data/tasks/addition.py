"""addition: two multi-digit numbers with carries, in the reversed and index-hint formats of the arithmetic
length-generalization papers, with per-token place ids (data/tasks/arithmetic.py). ID 1-5 digits per operand,
OOD 6-20.

    tokens  3 2 1 + 5 4 = 8 6 1 <end>       text  "321+54=" + " 861"      (123 + 45 = 168, reverse=all)
    places  1 2 3 0 1 2 0 1 2 3 0
"""

from __future__ import annotations

from dataclasses import dataclass

from posbench.data.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from posbench.data.tasks.task import TASKS


@TASKS.register("addition")
class Addition(ArithmeticTask):
    summary = "add two multi-digit numbers (reversed / index-hint formats, digit place ids)"
    op = "+"

    @dataclass
    class Config(ArithmeticConfig):
        pass

    def apply(self, a: int, b: int) -> int:
        return a + b

    def result_digits(self, n_a: int, n_b: int) -> int:
        return max(n_a, n_b) + 1
