"""A study task's training rows, generated once per (task, seed) and shared on disk by every PE's cell."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from posbench.data.tasks.source import TaskSource
from posbench.fileio import atomic_open
from posbench.targets import Rows


class CachedRows:
    """The task's training rows for this study, generated once per (task, seed) and shared on disk by
    every PE's cell: the cells of one seed see identical data (paired), and example generation, which
    costs about as much as a training step for these small models, is paid once instead of per PE."""

    def __init__(self, source: TaskSource, n_rows: int, cache_dir: Path):
        self.source, self.fingerprint = source, source.fingerprint
        self.tokenizer_fingerprint = source.tokenizer_fingerprint
        self.content = source.content
        self.bos_id = source.bos_id
        path = cache_dir / f"{source.fingerprint.replace(':', '_')}_T{source.seq_len}_n{n_rows}.npz"
        if not path.is_file():
            rows = source.samples(list(range(n_rows)))
            x, y = rows
            pos = {} if rows.positions is None else {"pos": rows.positions.numpy()}  # a task's own position ids
            with atomic_open(path, "wb") as f:  # concurrent writers produce identical files; never via a link
                np.savez(f, x=x.numpy(), y=y.numpy(), **pos)
        with np.load(path) as f:  # plain int arrays: allow_pickle stays False
            self.x, self.y = torch.from_numpy(f["x"]), torch.from_numpy(f["y"])
            self.pos = torch.from_numpy(f["pos"]) if "pos" in f.files else None

    def samples(self, indices):
        return Rows(self.x[indices], self.y[indices], None if self.pos is None else self.pos[indices])

    def val_samples(self, indices):
        return self.source.val_samples(indices)

    def n_val(self) -> int:
        return self.source.n_val()
