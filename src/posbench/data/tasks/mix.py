"""Task documents mixed into the pretraining text stream, deterministically, with no RNG and no state
beyond the stream itself.

Where task documents go (`unit`):
  tokens     (default) the share r of *tokens*: before each corpus document, task documents are added
             while task tokens < r / (1 - r) x corpus tokens so far. What "a 10% task mix" means to a
             reader, whatever the corpus documents' length.
  documents  the share r of *documents*, as the reference framework's 900:100 window: document i of the
             stream is a task document iff floor((i + 1) * r) > floor(i * r), an exact share of every
             window of 1/r documents.
Which task a task document comes from (`weights`, default equal): the task furthest behind its share,
i.e. the smallest amount_t / weight_t, amount counted in the mix's unit (a task's tokens, or its
documents); ties go to the task listed first. With equal weights and unit=documents this is round robin,
task k mod n for the k-th task document; with unit=tokens every task gets an equal share of the task
*tokens*, whatever its documents' lengths (a 40-token sort example and a 900-token needle haystack
would otherwise split the budget 1:20). Each task document is that task's next "train" example,
`first_example + (its documents so far)`, so no example repeats; every corpus document is kept, in order.

The data stage mixes each train input file on its own (`stream`): a shard depends only on its input
file, whatever the worker count, and file f draws its examples from `f * EXAMPLES_PER_FILE` on, so
different files never repeat an example. Task examples of the "train" split are disjoint by content
from the "id" split evaluators ask (tasks/task.py), and "ood" examples come from other lengths. `replay`
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

from posbench.config_loader import Checked
from posbench.data.tasks.filler import Filler
from posbench.data.tasks.task import Task, TaskConfig, build_task, require
from posbench.errors import brief, clip

EXAMPLES_PER_FILE = 1 << 32  # example-index stride between input files: more task docs than any file holds
CORPUS = "corpus"  # the kind of a document that is not a task document


@dataclass
class TaskMixConfig(Checked):
    """`data.mix`: which task documents go into the train shards, and how many (a share of tokens or of documents,
    `unit`)."""

    tasks: list[TaskConfig] = field(default_factory=list)  # empty = no task documents
    ratio: float = 0.1  # share of task tokens (or documents, see unit) in the train shards, in [0, 1)
    unit: Literal["tokens", "documents"] = "tokens"
    seed: int = 0  # which examples: task.example(seed, index, "train")
    # task name -> relative share of the task tokens (or documents); a task not named weighs 1
    weights: dict[str, float] = field(default_factory=dict)

    def check(self) -> None:
        super().check()
        require(0.0 <= self.ratio < 1.0, f"data.mix.ratio={self.ratio} must be in [0, 1) (0.1 = a tenth of the "
                                         f"train {self.unit} come from tasks)")
        names = [t.name for t in self.tasks]
        require(len(set(names)) == len(names), f"data.mix.tasks {brief(names)} list a task twice")
        require(self.seed >= 0, f"data.mix.seed={self.seed} must be >= 0")
        unknown = sorted(set(self.weights) - set(names))
        require(not unknown, f"data.mix.weights names {brief(unknown)}, which data.mix.tasks does not list "
                            f"({brief(names)})")
        for name, w in self.weights.items():
            require(isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0,
                    f"data.mix.weights.{clip(str(name), 40)}={brief(w)} must be a number > 0 (drop the task from "
                    "data.mix.tasks to leave it out)")

    def task_weights(self) -> list[float]:
        return [float(self.weights.get(t.name, 1.0)) for t in self.tasks]

    @property
    def active(self) -> bool:
        return bool(self.tasks) and self.ratio > 0


@dataclass(frozen=True)
class TaskDocument:
    task: str
    example_index: int
    text: str
    # the task's position id of each character of `text` (Task.text_positions), None when it defines none
    positions: tuple[int, ...] | None = None


@dataclass
class MixState:
    task_docs: int = 0
    corpus_docs: int = 0
    task_tokens: int = 0
    corpus_tokens: int = 0
    per_task_docs: list[int] = field(default_factory=list)  # = each task's next example (minus first_example)
    per_task_amount: list[int] = field(default_factory=list)  # tokens or documents, in the mix's unit

    def add_task_doc(self, task: int, n_tokens: int, unit: str) -> None:
        self.task_docs += 1
        self.task_tokens += n_tokens
        self.per_task_docs[task] += 1
        self.per_task_amount[task] += n_tokens if unit == "tokens" else 1

    def add_corpus_doc(self, n_tokens: int) -> None:
        self.corpus_docs += 1
        self.corpus_tokens += n_tokens


class TaskMixer:
    def __init__(self, tasks: list[Task], ratio: float = 0.1, seed: int = 0, unit: str = "documents",
                 weights: list[float] | None = None):
        require(0.0 <= ratio < 1.0, f"task mix: ratio={ratio} must be in [0, 1)")
        require(bool(tasks) or ratio == 0.0, "task mix: ratio > 0 needs at least one task")
        require(unit in ("tokens", "documents"), f"task mix: unit={unit!r} must be tokens or documents")
        weights = [1.0] * len(tasks) if weights is None else list(weights)
        require(len(weights) == len(tasks) and all(w > 0 for w in weights),
                f"task mix: weights {weights} must be one number > 0 per task ({len(tasks)})")
        self.tasks, self.seed, self.ratio, self.unit = list(tasks), seed, ratio, unit
        # exact rational arithmetic: float products like 30 * 0.1 would put boundaries off by one
        frac = Fraction(ratio).limit_denominator(1_000_000)
        self._p, self._q = frac.numerator, frac.denominator
        self._weights = [Fraction(w).limit_denominator(1_000_000) for w in weights]
        self._sequence: list[tuple[int, int]] = []  # (task, its n-th document) of the k-th, documents rule

    @property
    def fingerprint(self) -> str:
        """Identifies the mixed stream: ratio, unit, seed, weights and every task's name, config and filler."""
        blob = {"ratio": [self._p, self._q], "unit": self.unit, "seed": self.seed,
                "tasks": [t.fingerprint for t in self.tasks], "rule": "furthest_behind",
                "weights": [[w.numerator, w.denominator] for w in self._weights]}
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]

    def new_state(self) -> MixState:
        return MixState(per_task_docs=[0] * len(self.tasks), per_task_amount=[0] * len(self.tasks))

    def next_task(self, s: MixState) -> int:
        """Which task the next task document comes from: the one furthest behind its weighted share."""
        return min(range(len(self.tasks)), key=lambda t: (s.per_task_amount[t] / self._weights[t], t))

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

    def task_document(self, k: int, first_example: int = 0) -> TaskDocument:
        """The k-th task document under unit=documents (every document counts 1, whatever its tokens)."""
        if len(self._sequence) <= k:  # the rule needs the counts so far: walk it once, remember it
            s = self.new_state()
            for t, _ in self._sequence:
                s.add_task_doc(t, 0, "documents")
            while len(self._sequence) <= k:
                t = self.next_task(s)
                self._sequence.append((t, s.per_task_docs[t]))
                s.add_task_doc(t, 0, "documents")
        t, nth = self._sequence[k]
        return self.example_document(t, first_example + nth)

    # -- either rule ---------------------------------------------------------------------------------------
    def example_document(self, task: int, index: int) -> TaskDocument:
        """Task `task`'s train example `index` as a document."""
        t = self.tasks[task]
        ex = t.example(self.seed, index, "train")
        pos = t.text_positions(ex)
        return TaskDocument(t.name, index, ex.text, None if pos is None else tuple(pos.tolist()))

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
        for kind, ids, _ in self.stream_documents(corpus, encode, first_example):
            yield kind, ids

    def stream_documents(self, corpus: Iterable[str], encode: Callable[[str], np.ndarray], first_example: int = 0
                         ) -> Iterator[tuple[str, np.ndarray, TaskDocument | None]]:
        """`stream` with each task document itself (None for a corpus document): its per-character ids."""
        s = self.new_state()
        for text in corpus:
            while self.task_next(s):
                t = self.next_task(s)
                doc = self.example_document(t, first_example + s.per_task_docs[t])
                ids = encode(doc.text)
                yield doc.task, ids, doc
                s.add_task_doc(t, len(ids), self.unit)
            ids = encode(text)
            yield CORPUS, ids, None
            s.add_corpus_doc(len(ids))

    def replay(self, documents: Iterable[np.ndarray], encode: Callable[[str], np.ndarray],
               first_example: int = 0) -> Iterator[tuple[str, bool]]:
        """Walk a written stream's documents by the same rule: (kind, matches) per document, where a task
        document matches iff its tokens are exactly the example's the rule puts there."""
        for kind, matches, _ in self.replay_documents(documents, encode, first_example):
            yield kind, matches

    def replay_documents(self, documents: Iterable[np.ndarray], encode: Callable[[str], np.ndarray],
                         first_example: int = 0) -> Iterator[tuple[str, bool, TaskDocument | None]]:
        """`replay` with the task document the rule puts there (None for a corpus document)."""
        s = self.new_state()
        for ids in documents:
            if self.task_next(s):
                t = self.next_task(s)
                doc = self.example_document(t, first_example + s.per_task_docs[t])
                yield doc.task, bool(np.array_equal(ids, encode(doc.text))), doc
                s.add_task_doc(t, len(ids), self.unit)
            else:
                yield CORPUS, True, None
                s.add_corpus_doc(len(ids))


def build_mixer(cfg: TaskMixConfig, filler: Filler | None = None) -> TaskMixer:
    return TaskMixer([build_task(t, filler) for t in cfg.tasks], cfg.ratio if cfg.tasks else 0.0, cfg.seed,
                     cfg.unit, cfg.task_weights())


def mix_tag(cfg: TaskMixConfig, positions: bool = False) -> str:
    """Directory suffix of shards made with this mix ('' for none): a different mix never overwrites
    another's shards, and the loader finds exactly the shards of the configured mix. `positions`: the shards
    carry the tasks' position ids (data/token_positions.py), other data than the same mix without them."""
    return f"mix-{build_mixer(cfg).fingerprint[:10]}{'-pos' if positions else ''}" if cfg.active else ""


def position_tasks(cfg: TaskMixConfig) -> list[str]:
    """The mixed tasks that define per-token position ids (`Task.defines_positions`), none when the mix is off."""
    return [t.name for t in build_mixer(cfg).tasks if t.defines_positions] if cfg.active else []
