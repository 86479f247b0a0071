"""multiplication: two multi-digit numbers, in the reversed and index-hint formats of the arithmetic
length-generalization papers, with per-token place ids (data/tasks/arithmetic.py). ID 1-3 digits per operand,
OOD 4-8.

    tokens  3 2 1 * 5 4 = 5 3 5 5 <end>     text  "321*54=" + " 5355"     (123 * 45 = 5535, reverse=all)
    places  1 2 3 0 1 2 0 1 2 3 4 0

Place ids follow the digit's own number, as for addition (the Abacus rule). Cho et al. couple the
multiplication's operands differently (their section 6, N x 2 digits); that scheme is not implemented.
"""

from __future__ import annotations

from dataclasses import dataclass

from posbench.data.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from posbench.data.tasks.task import TASKS


@TASKS.register("multiplication")
class Multiplication(ArithmeticTask):
    summary = "multiply two multi-digit numbers (reversed / index-hint formats, digit place ids)"
    op = "*"

    @dataclass
    class Config(ArithmeticConfig):
        id_range: tuple[int, int] = (1, 3)
        ood_range: tuple[int, int] = (4, 8)

    def apply(self, a: int, b: int) -> int:
        return a * b

    def result_digits(self, n_a: int, n_b: int) -> int:
        return n_a + n_b
