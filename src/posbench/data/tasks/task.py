"""The task contract: small registered classes, each turning (seed, index, split) into one Example.

Shape legend: T example length in task tokens.

One example is drawn once from one RNG and rendered two ways:
  text    `prompt` + `answer` strings, for LM evaluation (greedy decoding after the prompt, exact match)
          and for mixing task documents into pretraining text;
  tokens  ids over the task's own small vocabulary (id 0 is always <pad>) with aligned targets:
          `targets_T[t]` is what the model should output after reading `tokens_T[0..t]`, IGNORE (-100)
          where nothing is asked. Answer-style tasks bake the next-token shift in (`answer_rows`),
          labelling tasks put the label of item t at position t (`label_rows`).

Splits: "train" and "id" share the in-distribution range, "ood" uses the out-of-distribution range.
Train and id use different RNG streams *and* are kept disjoint by content: an example is kept for train
only if a hash of its tokens is even, for id only if odd (redrawn otherwise), so an "id" score never
counts an example the model was trained on.

`chance_accuracy` is the per-target accuracy of guessing uniformly among the values a target can take
(0.5 for the balanced yes/no tasks); exact match of a whole multi-token answer by chance is ~0.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from posbench.config_loader import Checked, require, to_dict
from posbench.data.tasks.filler import Filler, GeneratedFiller
from posbench.errors import ConfigError
from posbench.registry import Registry
from posbench.targets import IGNORE  # target of positions with nothing to predict

SPLITS = ("train", "id", "ood")
_SPLIT_CODE = {"train": 0, "id": 1, "ood": 2}
PAD = "<pad>"
PAD_ID = 0
_MAX_ATTEMPTS = 64


@dataclass
class TaskConfig(Checked):
    """Base of every task's `Config`; `name` selects the registered task.

    Tasks with a length-like knob declare `id_range` and `ood_range` (inclusive [low, high]) in their
    own Config; they are checked here: well-formed, at least `range_min`, and OOD strictly above ID.
    """

    name: str = ""
    range_min: ClassVar[float] = 1
    # options added after shards were made, with the default that reproduces the old examples: left out
    # of the fingerprint at that default, so existing shard directories (mix-<fingerprint>) stay valid
    new_option_defaults: ClassVar[dict] = {}

    def check(self) -> None:
        """The ranges every length-like task declares; a task's own `check` calls this first (super().check())."""
        if hasattr(self, "id_range"):
            self.id_range = self._check_range("id_range")
            self.ood_range = self._check_range("ood_range")
            require(self.ood_range[0] > self.id_range[1],
                    f"task `{self.name}`: ood_range={list(self.ood_range)} must start above id_range="
                    f"{list(self.id_range)} (OOD means outside the in-distribution range)")

    def _check_range(self, field: str) -> tuple:
        r = getattr(self, field)
        require(isinstance(r, (list, tuple)) and len(r) == 2,
                f"task `{self.name}`: {field} must be [low, high], got {r!r}")
        require(r[0] <= r[1], f"task `{self.name}`: {field}={list(r)} has low > high")
        require(r[0] >= self.range_min, f"task `{self.name}`: {field}={list(r)} must be >= {self.range_min}")
        return tuple(r)

    def split_range(self, split: str) -> tuple:
        return self.ood_range if split == "ood" else self.id_range

    @classmethod
    def registry_lookup(cls, name: str, where: str = "task") -> type[TaskConfig]:
        return get_task_class(name, where).Config


@dataclass(frozen=True, eq=False)
class Example:
    prompt: str
    answer: str
    tokens_T: np.ndarray  # int64 ids in the task vocabulary
    targets_T: np.ndarray  # int64, IGNORE where there is no target
    info: dict  # what was drawn (length, distance, label, ...): range checks and per-bucket reports
    # per-token position ids the task defines (int64, aligned with tokens_T; arithmetic's digit places), None: the
    # model's own positions. The answer's part follows `Task.answer_positions`, so decoding can feed them too.
    positions_T: np.ndarray | None = None

    @property
    def text(self) -> str:
        """The whole example as one document (pretraining mix)."""
        return self.prompt + self.answer


class Vocab:
    """Symbols of a task's token form; id 0 is always <pad> so every task pads the same way."""

    def __init__(self, *groups):
        self.symbols = [PAD] + [s for g in groups for s in g]
        self._ids = {s: i for i, s in enumerate(self.symbols)}
        if len(self._ids) != len(self.symbols):
            raise TypeError(f"duplicate symbols in a task vocabulary: {self.symbols}")

    @property
    def size(self) -> int:
        return len(self.symbols)

    def id(self, symbol: str) -> int:
        return self._ids[symbol]

    def ids(self, symbols) -> list[int]:
        return [self._ids[s] for s in symbols]

    def decode(self, ids) -> list[str]:
        return [self.symbols[int(i)] for i in ids]


def answer_rows(prompt_ids: list[int], answer_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """tokens = prompt + answer; the target at t is token t+1 wherever that token is part of the answer."""
    tokens = np.asarray(prompt_ids + answer_ids, dtype=np.int64)
    targets = np.full(len(tokens), IGNORE, dtype=np.int64)
    start = len(prompt_ids) - 1
    targets[start:start + len(answer_ids)] = answer_ids
    return tokens, targets


def label_rows(item_ids: list[int], label_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """tokens = items; the target at t is the label of item t (IGNORE allowed)."""
    if len(item_ids) != len(label_ids):
        raise ValueError(f"{len(item_ids)} items but {len(label_ids)} labels")
    return np.asarray(item_ids, dtype=np.int64), np.asarray(label_ids, dtype=np.int64)


def uniform_int(rng: np.random.Generator, r: tuple) -> int:
    """An integer uniform in the inclusive range r."""
    return int(rng.integers(r[0], r[1] + 1))


class Task:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    Config: ClassVar[type[TaskConfig]] = TaskConfig
    binary: ClassVar[bool] = False  # targets are yes/no labels drawn ~50% positive
    uses_filler: ClassVar[bool] = False  # renders its text inside a Filler's words
    data_note: str = ""  # where the examples' content came from, when that can vary (reports)
    # the `info` key holding an example's length for per-length exact match by greedy decoding (studies'
    # "Exact match per digit count"); None: the task is not reported that way
    length_bin: ClassVar[str | None] = None

    def __init__(self, cfg: TaskConfig, filler: Filler | None = None):
        if not isinstance(cfg, self.Config):
            raise ConfigError(f"task `{self.name}` needs a {self.Config.__qualname__}, got {type(cfg).__name__}")
        self.cfg = cfg
        self.filler = (filler or self.default_filler()) if self.uses_filler else None
        self.vocab = self.build_vocab()

    # -- what a task defines --------------------------------------------------------------------------------
    def build_vocab(self) -> Vocab:
        raise NotImplementedError

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        raise NotImplementedError

    def max_tokens(self, split: str) -> int:
        """Longest token form any example of `split` can have (TaskSource checks it fits)."""
        raise NotImplementedError

    @property
    def chance_accuracy(self) -> float:
        raise NotImplementedError

    @property
    def source_end_token(self) -> int | None:
        """The token that ends the source in rows `source <it> target` (the encoder-decoder's split,
        model/encdec.py); None: the task has no source/target form (labelling tasks)."""
        return None

    def answer_positions(self, answer_ids: list[int]) -> list[int] | None:
        """The position ids of answer tokens, computed from the answer tokens up to each one (what a decoder has
        generated so far): the rule that extends `Example.positions_T` while generating. None: the task defines
        no ids."""
        return None

    @property
    def defines_positions(self) -> bool:
        """Whether this task's examples carry position ids (`Example.positions_T`); a task mixed into pretraining
        text then has them written beside its documents' tokens (data/token_positions.py)."""
        return False

    def text_positions(self, ex: Example) -> np.ndarray | None:
        """The position id of each character of `ex.text`, the form mixed into pretraining text (int64, one per
        character); None when the example has no ids. What the data stage aligns with the text tokenizer's tokens."""
        return None

    def default_filler(self) -> Filler:
        return GeneratedFiller()

    # -- shared machinery -----------------------------------------------------------------------------------
    def rng(self, seed: int, index: int, split: str, attempt: int = 0) -> np.random.Generator:
        """A generator that depends only on (task, seed, split, index, attempt). SeedSequence hashes the
        tuple stably across processes and runs (Python's hash() of str is salted per process)."""
        check_split(split)
        if seed < 0 or index < 0:
            raise ValueError(f"seed and index must be >= 0, got seed={seed} index={index}")
        task_code = zlib.crc32(self.name.encode())
        return np.random.default_rng(np.random.SeedSequence([seed, _SPLIT_CODE[split], index, task_code, attempt]))

    def example(self, seed: int, index: int, split: str) -> Example:
        return self.keep_split(lambda rng: self.generate(rng, split), seed, index, split)

    def keep_split(self, draw, seed: int, index: int, split: str) -> Example:
        """Redraw until the example's content hash matches the split's parity (train even, id odd)."""
        for attempt in range(_MAX_ATTEMPTS):
            ex = draw(self.rng(seed, index, split, attempt))
            if split == "ood" or content_parity(ex.tokens_T) == _SPLIT_CODE[split]:
                return ex
        raise ConfigError(f"task `{self.name}`: {_MAX_ATTEMPTS} draws gave no example for split {split!r}; "
                          f"the example space is too small to keep train and id apart, widen the ranges")

    def examples(self, seed: int, indices, split: str) -> list[Example]:
        return [self.example(seed, i, split) for i in indices]

    @property
    def fingerprint(self) -> str:
        """Identifies the examples this task produces: name, config and filler."""
        config = to_dict(self.cfg)
        for key, default in type(self.cfg).new_option_defaults.items():
            if config.get(key) == default:  # data made before the option existed keeps its identity
                config.pop(key)
        blob = {"task": self.name, "config": config,
                "filler": self.filler.fingerprint if self.filler is not None else None}
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def content_parity(tokens_T: np.ndarray) -> int:
    return hashlib.sha256(np.ascontiguousarray(tokens_T, dtype=np.int64).tobytes()).digest()[0] & 1


def check_split(split: str) -> None:
    if split not in _SPLIT_CODE:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")


def _check_task(name: str, cls) -> None:
    if not issubclass(cls.Config, TaskConfig):
        raise TypeError(f"{cls.__name__}.Config must subclass TaskConfig")
    if not cls.summary:
        raise TypeError(f"{cls.__name__} needs a one-line `summary`")


TASKS = Registry("task", _check_task)


def get_task_class(name: str, where: str = "task.name") -> type[Task]:
    return TASKS.get(name, where)


def task_names() -> list[str]:
    return TASKS.names()


def build_task(cfg: TaskConfig, filler: Filler | None = None) -> Task:
    """The task for `cfg`; `filler` is used by the tasks that render into filler text (passkey, needle)."""
    return get_task_class(cfg.name)(cfg, filler)
