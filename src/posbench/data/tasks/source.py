"""Training directly on a task: a BatchSource (training/batch_sources.py) over the task's token form, and the
batching helper evaluators use for "id"/"ood" rows.

Shape legend: B rows, T sequence length.

Row i of training is example i of split "train"; validation row i is example i of split "id" (kept
disjoint from train by base.Task.keep_split). Rows are right-padded with PAD_ID and IGNORE targets. An
example longer than the row is refused at construction rather than truncated: cutting it would drop the
answer and train on a question with no target.
"""

from __future__ import annotations

import numpy as np
import torch

from posbench.data.tasks.task import IGNORE, PAD_ID, Example, Task, require
from posbench.targets import Rows


def pad_positions(examples: list[Example], T: int) -> torch.Tensor | None:
    """(B, T) int64 position ids of the examples' rows, None when no example defines any: an example's own
    `positions_T` (a task's digit places), its token indices where it has none, 0 on padding (padding is never a
    target and, causally, never seen by a real token)."""
    if all(ex.positions_T is None for ex in examples):
        return None
    pos_BT = np.zeros((len(examples), T), dtype=np.int64)
    for b, ex in enumerate(examples):
        n = len(ex.tokens_T)
        pos_BT[b, :n] = np.arange(n) if ex.positions_T is None else ex.positions_T
    return torch.from_numpy(pos_BT)


def pad_rows(examples: list[Example], seq_len: int | None = None) -> Rows:
    """(inputs_BT, targets_BT) int64, right-padded to seq_len (default: the longest example), with the examples'
    position ids as `.positions` (`pad_positions`)."""
    longest = max((len(ex.tokens_T) for ex in examples), default=0)
    T = longest if seq_len is None else seq_len
    if longest > T:
        raise ValueError(f"an example has {longest} tokens, more than the row length {T}")
    inputs_BT = np.full((len(examples), T), PAD_ID, dtype=np.int64)
    targets_BT = np.full((len(examples), T), IGNORE, dtype=np.int64)
    for b, ex in enumerate(examples):
        inputs_BT[b, : len(ex.tokens_T)] = ex.tokens_T
        targets_BT[b, : len(ex.targets_T)] = ex.targets_T
    return Rows(torch.from_numpy(inputs_BT), torch.from_numpy(targets_BT), pad_positions(examples, T))


def eval_batch(task: Task, seed: int, split: str, indices, seq_len: int | None = None):
    """Examples `indices` of `split` ("id" or "ood") and their padded rows: (examples, inputs_BT, targets_BT)."""
    examples = task.examples(seed, indices, split)
    return (examples, *pad_rows(examples, seq_len))


class TaskSource:
    """BatchSource: `samples(indices)` -> (inputs_BT, targets_BT) of split "train", T = seq_len."""

    def __init__(self, task: Task, seq_len: int, seed: int, n_val: int = 512):
        need = max(task.max_tokens("train"), task.max_tokens("id"))
        require(seq_len >= need, f"task `{task.name}` makes examples of up to {need} tokens but rows have "
                                 f"seq_len={seq_len}; raise model.seq_len or shrink the task's id_range")
        require(n_val >= 1, f"task source: n_val={n_val} must be >= 1")
        require(seed >= 0, f"task source: seed={seed} must be >= 0")
        self.task, self.seq_len, self.seed, self._n_val = task, seq_len, seed, n_val
        self.fingerprint = f"task:{task.name}:{task.fingerprint}:seed{seed}"
        self.tokenizer_fingerprint = ""  # rows are ids of the task's own vocabulary, not text
        self.content = {}  # generated rows: no shard files
        self.bos_id = None  # one example per row: a row is one document

    @property
    def vocab_size(self) -> int:
        """The model's vocabulary must hold at least this many ids."""
        return self.task.vocab.size

    def samples(self, indices: list[int]) -> Rows:
        return pad_rows(self.task.examples(self.seed, indices, "train"), self.seq_len)

    def val_samples(self, indices: list[int]) -> Rows:
        bad = [i for i in indices if not 0 <= i < self._n_val]
        if bad:
            raise IndexError(f"validation rows {bad[:4]} outside [0, {self._n_val})")
        return pad_rows(self.task.examples(self.seed, indices, "id"), self.seq_len)

    def n_val(self) -> int:
        return self._n_val

