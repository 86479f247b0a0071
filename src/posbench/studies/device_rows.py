"""A batched group's training rows on its device (studies/batched_train.py): each distinct row table moved there
once and read by every member that trains on it, so a step's batch is sliced on the device instead of gathered on
the host and copied per member and per step.

A study's rows are generated once per (task, seed) (`row_cache.CachedRows`); members of one seed (rows of several
PEs batched together) share one table on the device, members of several seeds hold one table each. A source
without a table (`RandomTokens` in the tests, any other `BatchSource`) is read through its own `samples` and
copied, as the lone loop reads it.

Shape legend: M members, B batch, T tokens, N rows of a table.
"""

from __future__ import annotations

import torch

from posbench.studies.row_cache import CachedRows
from posbench.targets import Rows, positions_of
from posbench.training.batch_sources import BatchSource


class TableRows:
    """One cached table of rows on the device: a step's rows are a slice of it."""

    def __init__(self, source: CachedRows, device: torch.device):
        self.x_NT, self.y_NT = source.x.to(device), source.y.to(device)
        self.pos_NT = None if source.pos is None else source.pos.to(device)

    def samples(self, indices: list[int]) -> Rows:
        # micro_indices are a contiguous range: a view of the table, no gather
        contiguous = indices == list(range(indices[0], indices[0] + len(indices)))
        rows = slice(indices[0], indices[0] + len(indices)) if contiguous else torch.tensor(
            indices, device=self.x_NT.device)
        return Rows(self.x_NT[rows], self.y_NT[rows], None if self.pos_NT is None else self.pos_NT[rows])


class CopiedRows:
    """A source without a table, read as the lone loop reads it and copied to the device per step."""

    def __init__(self, source: BatchSource, device: torch.device):
        self.source, self.device = source, device

    def samples(self, indices: list[int]) -> Rows:
        rows = self.source.samples(indices)
        pos = positions_of(rows)
        return Rows(rows[0].to(self.device), rows[1].to(self.device), None if pos is None else pos.to(self.device))


class DeviceRows:
    """Every member's rows on `device`; members whose sources hold the same table share one copy (`tables`)."""

    def __init__(self, sources: list[BatchSource], device: torch.device):
        self.tables: dict[tuple, TableRows] = {}
        self.members: list[TableRows | CopiedRows] = []
        for s in sources:
            if isinstance(s, CachedRows):
                # one (task, seed) and row count is one file of identical rows, whichever PE's cell loaded it
                key = (s.fingerprint, tuple(s.x.shape))
                self.members.append(self.tables.setdefault(key, TableRows(s, device)))
            else:
                self.members.append(CopiedRows(s, device))

    def batch(self, indices: list[int]) -> tuple[torch.Tensor, ...]:
        """(x_MBT, y_MBT), then the data's position ids (M, B, T) where the task defines them."""
        rows = [m.samples(indices) for m in self.members]
        pos = [positions_of(r) for r in rows]
        out = (torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows]))
        return out if pos[0] is None else (*out, torch.stack(pos))
