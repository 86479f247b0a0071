"""Task documents mixed into the pretraining text stream, deterministically, with no RNG and no state
beyond the stream itself.

Where task documents go (`unit`):
  tokens     (default) the share r of *tokens*: before each corpus document, task documents are added
             while task tokens < r / (1 - r) x corpus tokens so far. What "a 10% task mix" means to a
             reader, whatever the corpus documents' length.
  documents  the share r of *documents*, as the reference framework's 900:100 window: document i of the
             stream is a task document iff floor((i + 1) * r) > floor(i * r), an exact share of every
             window of 1/r documents.
The k-th task document goes to the tasks in turn, task k mod n, as that task's "train" example
`first_example + k // n`, so no example repeats; every corpus document is kept, in order.

The data stage mixes each train input file on its own (`stream`): a shard depends only on its input
file, whatever the worker count, and file f draws its examples from `f * EXAMPLES_PER_FILE` on, so
different files never repeat an example. Task examples of the "train" split are disjoint by content
from the "id" split evaluators ask (tasks/base.py), and "ood" examples come from other lengths. `replay`
walks a written shard by the same rule, to recount (and check) what it holds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

import numpy as np

from posbench.data.tasks.base import Task, TaskConfig, build_task, require
from posbench.data.tasks.filler import Filler

EXAMPLES_PER_FILE = 1 << 32  # example-index stride between input files: more task docs than any file holds
CORPUS = "corpus"  # the kind of a document that is not a task document


@dataclass
class TaskMixConfig:
    """`data.mix`: which task documents go into the train shards, and how many (a share of documents)."""

    tasks: list[TaskConfig] = field(default_factory=list)  # empty = no task documents
    ratio: float = 0.1  # share of task tokens (or documents, see unit) in the train shards, in [0, 1)
    unit: Literal["tokens", "documents"] = "tokens"
    seed: int = 0  # which examples: task.example(seed, index, "train")

    def __post_init__(self):
        require(0.0 <= self.ratio < 1.0, f"data.mix.ratio={self.ratio} must be in [0, 1) (0.1 = a tenth of the "
                                         f"train {self.unit} come from tasks)")
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


@dataclass
class MixState:
    task_docs: int = 0
    corpus_docs: int = 0
    task_tokens: int = 0
    corpus_tokens: int = 0


class TaskMixer:
    def __init__(self, tasks: list[Task], ratio: float = 0.1, seed: int = 0, unit: str = "documents"):
        require(0.0 <= ratio < 1.0, f"task mix: ratio={ratio} must be in [0, 1)")
        require(bool(tasks) or ratio == 0.0, "task mix: ratio > 0 needs at least one task")
        require(unit in ("tokens", "documents"), f"task mix: unit={unit!r} must be tokens or documents")
        self.tasks, self.seed, self.ratio, self.unit = list(tasks), seed, ratio, unit
        # exact rational arithmetic: float products like 30 * 0.1 would put boundaries off by one
        frac = Fraction(ratio).limit_denominator(1_000_000)
        self._p, self._q = frac.numerator, frac.denominator

    @property
    def fingerprint(self) -> str:
        """Identifies the mixed stream: ratio, unit, seed and every task's name, config and filler."""
        blob = {"ratio": [self._p, self._q], "unit": self.unit, "seed": self.seed,
                "tasks": [t.fingerprint for t in self.tasks]}
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]

    # -- the document rule -------------------------------------------------------------------------------------
    def task_docs_before(self, doc_index: int) -> int:
        """How many of documents 0..doc_index-1 are task documents (unit=documents)."""
        return doc_index * self._p // self._q

    def is_task_doc(self, doc_index: int) -> bool:
        return self.task_docs_before(doc_index + 1) > self.task_docs_before(doc_index)

    def corpus_index(self, doc_index: int) -> int:
        """For a corpus document, its index in the corpus stream."""
        return doc_index - self.task_docs_before(doc_index)

    def document(self, doc_index: int, first_example: int = 0) -> TaskDocument | None:
        """The task document at `doc_index` (unit=documents), or None where the corpus goes."""
        if doc_index < 0:
            raise ValueError(f"doc_index must be >= 0, got {doc_index}")
        if not self.is_task_doc(doc_index):
            return None
        return self.task_document(self.task_docs_before(doc_index), first_example)

    # -- either rule ---------------------------------------------------------------------------------------
    def task_document(self, k: int, first_example: int = 0) -> TaskDocument:
        """The k-th task document of a stream: task k mod n, its train example first_example + k // n."""
        task = self.tasks[k % len(self.tasks)]
        index = first_example + k // len(self.tasks)
        return TaskDocument(task.name, index, task.example(self.seed, index, "train").text)

    def task_next(self, s: MixState) -> bool:
        """Whether the next document of the stream is a task document."""
        if not self.tasks or self._p == 0:
            return False
        if self.unit == "documents":
            return self.is_task_doc(s.task_docs + s.corpus_docs)
        # task_tokens < r / (1 - r) * corpus_tokens, in integers
        return s.corpus_docs > 0 and s.task_tokens * (self._q - self._p) < self._p * s.corpus_tokens

    def stream(self, corpus: Iterable[str], encode: Callable[[str], np.ndarray],
               first_example: int = 0) -> Iterator[tuple[str, np.ndarray]]:
        """(kind, tokens) of the mixed stream over `corpus`, kind = a task name or CORPUS; `encode` gives a
        document's tokens as written (with its <|bos|>). It ends with the last corpus document."""
        s = MixState()
        for text in corpus:
            while self.task_next(s):
                ids = encode(self.task_document(s.task_docs, first_example).text)
                yield self.tasks[s.task_docs % len(self.tasks)].name, ids
                s.task_docs += 1
                s.task_tokens += len(ids)
            ids = encode(text)
            yield CORPUS, ids
            s.corpus_docs += 1
            s.corpus_tokens += len(ids)

    def replay(self, documents: Iterable[np.ndarray], encode: Callable[[str], np.ndarray],
               first_example: int = 0) -> Iterator[tuple[str, bool]]:
        """Walk a written stream's documents by the same rule: (kind, matches) per document, where a task
        document matches iff its tokens are exactly the example's the rule puts there."""
        s = MixState()
        for ids in documents:
            if self.task_next(s):
                doc = self.task_document(s.task_docs, first_example)
                yield doc.task, bool(np.array_equal(ids, encode(doc.text)))
                s.task_docs += 1
                s.task_tokens += len(ids)
            else:
                yield CORPUS, True
                s.corpus_docs += 1
                s.corpus_tokens += len(ids)


def build_mixer(cfg: TaskMixConfig, filler: Filler | None = None) -> TaskMixer:
    return TaskMixer([build_task(t, filler) for t in cfg.tasks], cfg.ratio if cfg.tasks else 0.0, cfg.seed,
                     cfg.unit)


def mix_tag(cfg: TaskMixConfig) -> str:
    """Directory suffix of shards made with this mix ('' for none): a different mix never overwrites
    another's shards, and the loader finds exactly the shards of the configured mix."""
    return f"mix-{build_mixer(cfg).fingerprint[:10]}" if cfg.active else ""
