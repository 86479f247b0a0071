"""Passkey retrieval (Mohtashami & Jaggi 2023, "Landmark Attention", section 4.2): accuracy by context
length x depth of the key in the haystack. The grid machinery is shared with niah (retrieval.py).

Depth d puts the key after round(d x units) of the filler units that fit in the length: 0 = the key is
the first thing after the instruction, 1 = it sits right before the question.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from posbench.data.tasks import Example, TaskConfig, get_task_class
from posbench.evaluation.retrieval import GridConfig, RetrievalGrid
from posbench.evaluation.suite_registry import SUITES


@dataclass(frozen=True)
class PasskeyConfig(GridConfig):
    task: TaskConfig = field(default_factory=lambda: get_task_class("passkey").Config())  # key_digits, ...
    task_name: ClassVar[str] = "passkey"


@SUITES.register("passkey")
class PasskeyGrid(RetrievalGrid):
    title = "Passkey retrieval (accuracy, length x depth)"
    options = PasskeyConfig
    order = 3

    def make_example(self, index: int, units: int, depth: float, seed: int) -> Example:
        prefix = round(depth * units)
        return self.task.example_at(seed, index, distance=units - prefix, prefix=prefix)
