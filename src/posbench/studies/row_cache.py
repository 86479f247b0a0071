"""A study task's training rows, generated once per (task, seed) and shared on disk by every PE's cell."""

from __future__ import annotations

import fcntl
from pathlib import Path

import numpy as np
import torch

from posbench.data.tasks.source import TaskSource
from posbench.fileio import atomic_open, open_append
from posbench.targets import Rows


class CachedRows:
    """The task's training rows for this study, generated once per (task, seed) and shared on disk by
    every PE's cell: the cells of one seed see identical data (paired), and example generation, which
    costs about as much as a training step for these small models, is paid once instead of per PE or per
    worker process."""

    def __init__(self, source: TaskSource, n_rows: int, cache_dir: Path):
        self.source, self.fingerprint = source, source.fingerprint
        self.tokenizer_fingerprint = source.tokenizer_fingerprint
        self.content = source.content
        self.bos_id = source.bos_id
        path = cache_dir / f"{source.fingerprint.replace(':', '_')}_T{source.seq_len}_n{n_rows}.npz"
        if not path.is_file():
            # one worker generates, the others wait for its file: workers starting rows of one (task, seed) at
            # once would each pay the generation (150-180 CPU-seconds a long-context table on a GPU host)
            cache_dir.mkdir(parents=True, exist_ok=True)
            with open_append(path.with_name(f"{path.name}.lock")) as lock:  # never through a link
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
                if not path.is_file():
                    self._write(source, n_rows, path)
        with np.load(path) as f:  # plain int arrays: allow_pickle stays False
            self.x, self.y = torch.from_numpy(f["x"]), torch.from_numpy(f["y"])
            self.pos = torch.from_numpy(f["pos"]) if "pos" in f.files else None

    @staticmethod
    def _write(source: TaskSource, n_rows: int, path: Path) -> None:
        rows = source.samples(list(range(n_rows)))
        x, y = rows
        pos = {} if rows.positions is None else {"pos": rows.positions.numpy()}  # a task's own position ids
        with atomic_open(path, "wb") as f:  # never via a link
            np.savez(f, x=x.numpy(), y=y.numpy(), **pos)

    def samples(self, indices):
        return Rows(self.x[indices], self.y[indices], None if self.pos is None else self.pos[indices])

    def val_samples(self, indices):
        return self.source.val_samples(indices)

    def n_val(self) -> int:
        return self.source.n_val()
