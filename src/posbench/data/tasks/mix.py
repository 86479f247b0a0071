"""Task documents mixed into the pretraining text stream, deterministically by document index.

Document i of a mixed stream is a task document iff floor((i + 1) * r) > floor(i * r) for the ratio
r (default 10%, as the reference framework's 900:100 document window): an exact share of every window
of 1/r documents, no RNG and no state, so resuming or re-sharding at any index gives the same stream.
The k-th task document (k = floor(i * r)) goes to the tasks in turn, task k mod n, as that task's
"train" example `first_example + k // n`, so no example repeats. Everything else is corpus document
i - k (`corpus_index`), so no corpus document is skipped either.

The data stage mixes each train input file on its own (`interleave`): a shard depends only on its
input file, whatever the worker count, and file f draws its examples from `f * EXAMPLES_PER_FILE` on,
so different files never repeat an example. Task examples of the "train" split are disjoint by content
from the "id" split evaluators ask (tasks/base.py), and "ood" examples come from other lengths.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction

from posbench.data.tasks.base import Task, TaskConfig, build_task, require
from posbench.data.tasks.filler import Filler

EXAMPLES_PER_FILE = 1 << 32  # example-index stride between input files: more task docs than any file holds
CORPUS = "corpus"  # the kind of a document that is not a task document


@dataclass
class TaskMixConfig:
    """`data.mix`: which task documents go into the train shards, and how many (a share of documents)."""

    tasks: list[TaskConfig] = field(default_factory=list)  # empty = no task documents
    ratio: float = 0.1  # share of documents that are task documents, in [0, 1)
    seed: int = 0  # which examples: task.example(seed, index, "train")

    def __post_init__(self):
        require(0.0 <= self.ratio < 1.0, f"data.mix.ratio={self.ratio} must be in [0, 1) (0.1 = one document "
                                         "in ten is a task document)")
        names = [t.name for t in self.tasks]
        require(len(set(names)) == len(names), f"data.mix.tasks {names} list a task twice")
        require(self.seed >= 0, f"data.mix.seed={self.seed} must be >= 0")

    @property
    def active(self) -> bool:
        return bool(self.tasks) and self.ratio > 0


@dataclass(frozen=True)
class TaskDocument:
    task: str
    example_index: int
    text: str


class TaskMixer:
    def __init__(self, tasks: list[Task], ratio: float = 0.1, seed: int = 0):
        require(0.0 <= ratio < 1.0, f"task mix: ratio={ratio} must be in [0, 1)")
        require(bool(tasks) or ratio == 0.0, "task mix: ratio > 0 needs at least one task")
        self.tasks, self.seed, self.ratio = list(tasks), seed, ratio
        # exact rational arithmetic: float products like 30 * 0.1 would put boundaries off by one
        frac = Fraction(ratio).limit_denominator(1_000_000)
        self._p, self._q = frac.numerator, frac.denominator

    @property
    def fingerprint(self) -> str:
        """Identifies the mixed stream: ratio, seed and every task's name, config and filler."""
        blob = {"ratio": [self._p, self._q], "seed": self.seed, "tasks": [t.fingerprint for t in self.tasks]}
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]

    def task_docs_before(self, doc_index: int) -> int:
        """How many of documents 0..doc_index-1 are task documents."""
        return doc_index * self._p // self._q

    def is_task_doc(self, doc_index: int) -> bool:
        return self.task_docs_before(doc_index + 1) > self.task_docs_before(doc_index)

    def corpus_index(self, doc_index: int) -> int:
        """For a corpus document, its index in the corpus stream."""
        return doc_index - self.task_docs_before(doc_index)

    def document(self, doc_index: int, first_example: int = 0) -> TaskDocument | None:
        """The task document at `doc_index`, or None where the corpus goes."""
        if doc_index < 0:
            raise ValueError(f"doc_index must be >= 0, got {doc_index}")
        if not self.is_task_doc(doc_index):
            return None
        k = self.task_docs_before(doc_index)
        task = self.tasks[k % len(self.tasks)]
        index = first_example + k // len(self.tasks)
        return TaskDocument(task.name, index, task.example(self.seed, index, "train").text)

    def interleave(self, corpus: Iterable[str], first_example: int = 0) -> Iterator[tuple[str, str]]:
        """(kind, text) of the mixed stream over `corpus`, kind = a task name or CORPUS. It ends with the
        last corpus document, so a file's task documents are exactly those the mixer places before it."""
        i = 0
        for text in corpus:
            while (doc := self.document(i, first_example)) is not None:
                yield doc.task, doc.text
                i += 1
            yield CORPUS, text
            i += 1


def build_mixer(cfg: TaskMixConfig, filler: Filler | None = None) -> TaskMixer:
    return TaskMixer([build_task(t, filler) for t in cfg.tasks], cfg.ratio if cfg.tasks else 0.0, cfg.seed)


def mix_tag(cfg: TaskMixConfig) -> str:
    """Directory suffix of shards made with this mix ('' for none): a different mix never overwrites
    another's shards, and the loader finds exactly the shards of the configured mix."""
    return f"mix-{build_mixer(cfg).fingerprint[:10]}" if cfg.active else ""
