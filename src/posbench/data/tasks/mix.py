"""Task documents mixed into the pretraining text stream, deterministically by global document index.

Document i of the mixed stream is a task document iff floor((i + 1) * r) > floor(i * r) for the ratio
r (default 10%): an exact share of every window of 1/r documents, no RNG and no state, so resuming or
re-sharding at any index gives the same stream. The k-th task document (k = floor(i * r)) goes to the
tasks in turn, task k mod n, as that task's "train" example k // n, so no example repeats. Everything
else is corpus document i - k (`corpus_index`), so no corpus document is skipped either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from posbench.data.tasks.base import Task, TaskConfig, build_task, require
from posbench.data.tasks.filler import Filler


@dataclass
class TaskMixConfig:
    tasks: list[TaskConfig] = field(default_factory=list)  # empty = no task documents
    ratio: float = 0.1  # share of documents that are task documents

    def __post_init__(self):
        require(0.0 <= self.ratio < 1.0, f"task mix: ratio={self.ratio} must be in [0, 1)")
        names = [t.name for t in self.tasks]
        require(len(set(names)) == len(names), f"task mix: tasks {names} list a task twice")


@dataclass(frozen=True)
class TaskDocument:
    task: str
    example_index: int
    text: str


class TaskMixer:
    def __init__(self, tasks: list[Task], ratio: float = 0.1, seed: int = 0):
        require(0.0 <= ratio < 1.0, f"task mix: ratio={ratio} must be in [0, 1)")
        require(bool(tasks) or ratio == 0.0, "task mix: ratio > 0 needs at least one task")
        self.tasks, self.seed = list(tasks), seed
        # exact rational arithmetic: float products like 30 * 0.1 would put boundaries off by one
        frac = Fraction(ratio).limit_denominator(1_000_000)
        self._p, self._q = frac.numerator, frac.denominator

    def task_docs_before(self, doc_index: int) -> int:
        """How many of documents 0..doc_index-1 are task documents."""
        return doc_index * self._p // self._q

    def is_task_doc(self, doc_index: int) -> bool:
        return self.task_docs_before(doc_index + 1) > self.task_docs_before(doc_index)

    def corpus_index(self, doc_index: int) -> int:
        """For a corpus document, its index in the corpus stream."""
        return doc_index - self.task_docs_before(doc_index)

    def document(self, doc_index: int) -> TaskDocument | None:
        """The task document at `doc_index`, or None where the corpus goes."""
        if doc_index < 0:
            raise ValueError(f"doc_index must be >= 0, got {doc_index}")
        if not self.is_task_doc(doc_index):
            return None
        k = self.task_docs_before(doc_index)
        task = self.tasks[k % len(self.tasks)]
        index = k // len(self.tasks)
        return TaskDocument(task.name, index, task.example(self.seed, index, "train").text)


def build_mixer(cfg: TaskMixConfig, seed: int, filler: Filler | None = None) -> TaskMixer:
    return TaskMixer([build_task(t, filler) for t in cfg.tasks], cfg.ratio, seed)
