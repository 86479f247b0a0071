"""What the training loop reads: batches addressed by global sample index.

The loop never iterates a dataloader. For step s, micro-batch m, rank r of W, it asks for samples

    s * G + r * (A * M) + m * M  ...  + M - 1        (G = W * A * M sequences per step)

so the set of samples in a step does not depend on the world size, and the data cursor is just the
step: resuming at step s reproduces the exact batches. A source maps a sample index to one
(input, target) row; its `fingerprint` identifies the data for resume checks.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from posbench.errors import ConfigError
from posbench.targets import positions_of

if TYPE_CHECKING:
    from posbench.config import RunConfig


class BatchSource(Protocol):
    fingerprint: str
    tokenizer_fingerprint: str  # the full fingerprint of the text tokenizer; "" when rows are not text
    bos_id: int | None  # the token that starts each document in a row; None: a row is one document
    content: dict[str, str]  # shard file name -> content fingerprint (data/shards.py); {} when rows are generated

    def samples(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Training rows (B, T) int64 inputs and targets (-100 where there is no target); a `targets.Rows` when
        the data defines its own position ids (a task's digit places), which the loop hands the model."""

    def val_samples(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of the fixed validation set."""

    def n_val(self) -> int:
        """How many validation rows exist."""


def positions_on(rows, device) -> torch.Tensor | None:
    """The data's position ids of a batch (`targets.positions_of`) on `device`; None when it has none."""
    pos = positions_of(rows)
    return None if pos is None else pos.to(device, non_blocking=True)


def micro_indices(step: int, micro: int, micro_batch: int, accum: int, rank: int, world: int) -> list[int]:
    per_rank = accum * micro_batch
    start = step * world * per_rank + rank * per_rank + micro * micro_batch
    return list(range(start, start + micro_batch))


def val_indices(batch: int, micro_batch: int, rank: int, world: int, n_val: int) -> list[int]:
    """Validation rows for this rank: the fixed first rows of the validation set, split by rank."""
    start = (batch * world + rank) * micro_batch
    return [i % max(1, n_val) for i in range(start, start + micro_batch)]


class RandomTokens:
    """Uniform random tokens, a pure function of (seed, index): for benchmarks and smoke runs only
    (there is nothing to learn)."""

    def __init__(self, vocab_size: int, seq_len: int, seed: int = 0, n_val: int = 64):
        self.vocab_size, self.seq_len, self.seed, self._n_val = vocab_size, seq_len, seed, n_val
        self.fingerprint = f"random-v{vocab_size}-t{seq_len}-s{seed}"
        self.tokenizer_fingerprint = ""
        self.content = {}
        self.bos_id = None  # no documents: each row is one

    def _rows(self, indices: list[int], split: int) -> tuple[torch.Tensor, torch.Tensor]:
        # numpy's SeedSequence mixes all words; torch's CPU generator keeps only 32 bits of a seed,
        # which silently made "validation" rows equal to training rows in an earlier version
        rows = [np.random.default_rng([self.seed, split, i]).integers(0, self.vocab_size, self.seq_len + 1)
                for i in indices]
        batch = torch.from_numpy(np.stack(rows)).long()
        return batch[:, :-1], batch[:, 1:]

    def samples(self, indices):
        return self._rows(indices, 0)

    def val_samples(self, indices):
        return self._rows(indices, 1)

    def n_val(self) -> int:
        return self._n_val


def bind_documents(cfg: RunConfig, source: BatchSource) -> RunConfig:
    """`cfg` with `model.packing.bos_id` taken from the data when a packing switch is on and it is unset: the data
    stage says where documents start, and the config carries it to the checkpoint, so evaluation reads windows as
    training did. A bos_id that contradicts the data is refused. A source without documents (task rows, random
    tokens; any source without a `bos_id`) leaves it None: each row is one document."""
    packing, bos_id = cfg.model.packing, getattr(source, "bos_id", None)
    if packing.is_default or bos_id is None or packing.bos_id == bos_id:
        return cfg
    if packing.bos_id is not None:
        raise ConfigError(f"model.packing.bos_id={packing.bos_id}, but the training data starts its documents with "
                          f"token {bos_id}; leave model.packing.bos_id unset to take it from the data")
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, packing=dataclasses.replace(
        packing, bos_id=bos_id)))


def build_stream(cfg: RunConfig) -> BatchSource:
    """The BatchSource a run's config asks for: random tokens (`train.stream=random`), a task's rows
    (`train.stream=task`, data.task: a study cell's rows, studies/cell.py) or its token shards."""
    if cfg.train.stream == "random":
        return RandomTokens(cfg.model.vocab_size, cfg.model.seq_len, cfg.seed)
    if cfg.train.stream == "task":
        return task_rows(cfg)
    from posbench.data.loader import build_batch_source

    check_data_positions(cfg)
    source = build_batch_source(cfg.data, cfg.model.seq_len)
    for split, shards in (("train", source.train), ("val", source.val)):  # a val id past the table: IndexError
        if shards.vocab_size > cfg.model.vocab_size:
            raise ConfigError(f"the {split} token shards use a vocabulary of {shards.vocab_size} but model.vocab_size "
                              f"is {cfg.model.vocab_size}; set model.vocab_size={shards.vocab_size}")
    return source


def task_rows(cfg: RunConfig) -> BatchSource:
    """data.task's rows at the model's length, as a study cell draws them (the same seed, the same 64 held-out
    rows): a cell's saved config trains again the model it describes."""
    from posbench.data.tasks.source import TaskSource
    from posbench.data.tasks.task import build_task

    if cfg.data.task is None:
        raise ConfigError("train.stream=task needs data.task (e.g. data.task={name: k_back, k: 3})")
    task = build_task(cfg.data.task)
    if task.vocab.size > cfg.model.vocab_size:
        raise ConfigError(f"data.task `{task.name}` has {task.vocab.size} symbols but model.vocab_size is "
                          f"{cfg.model.vocab_size}; set model.vocab_size={task.vocab.size}")
    return TaskSource(task, cfg.model.seq_len, cfg.seed, n_val=64)


def check_data_positions(cfg: RunConfig) -> None:
    """A PE that reads the data's position ids (abacus, coupled) training on shards whose task mix defines ids needs
    a tokenizer that can carry them (data/token_positions.py): else it is refused here, before any data is read or
    tokenized, instead of training on token indices where the task meant digit places."""
    from posbench.data.token_positions import positions_refusal
    from posbench.pe import PES

    if cfg.train.stream != "shards" or not PES.get(cfg.pe.name).reads_data_positions():
        return
    reason = positions_refusal(cfg.data.mix, cfg.data.tokenizer, cfg.pe.name)
    if reason:
        raise ConfigError(reason)
