"""Needle in a haystack (Kamradt 2023; RULER's single key -> value needle, Hsieh et al. 2024): the
accuracy heatmap of context length x depth of the fact. Grid machinery shared with passkey.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from posbench.data.tasks import Example, TaskConfig, get_task_class
from posbench.evaluation.retrieval import GridConfig, RetrievalGrid
from posbench.evaluation.suite_registry import SUITES


@dataclass(frozen=True)
class NiahConfig(GridConfig):
    task: TaskConfig = field(default_factory=lambda: get_task_class("needle").Config())  # value_digits, ...
    task_name: ClassVar[str] = "needle"


@SUITES.register("niah")
class NeedleGrid(RetrievalGrid):
    title = "Needle in a haystack (accuracy, length x depth)"
    options = NiahConfig
    order = 4

    def make_example(self, index: int, units: int, depth: float, seed: int) -> Example:
        return self.task.example_at(seed, index, filler_len=units, depth=depth)
