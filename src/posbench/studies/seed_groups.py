"""Which study cells train together as one batched model (studies/batched_train.py): those whose settings
differ only in seed. The grouping compares what decides a cell's training and scoring (its resolved
RunConfig without seed and run name, its task, the study's eval settings), never names."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from posbench.config_loader import to_dict
from posbench.data.tasks.task import build_task
from posbench.model.flops import model_stats
from posbench.studies.batched_train import why_not_batched
from posbench.studies.cell_config import cell_config
from posbench.studies.study_spec import Cell

MAX_MEMBERS = 8  # members per group: beyond a handful a group only makes fewer, longer jobs to share out


@dataclass
class SeedGroup:
    cells: list[Cell]
    reason: str | None = None  # why these settings train separately (one cell per group then)
    cell_flops: float = 0.0  # one cell's training FLOPs: the longest jobs start first

    @property
    def flops(self) -> float:
        return self.cell_flops * len(self.cells)

    @property
    def name(self) -> str:
        """The group's job and log name: the cells' shared id with every seed, e.g. `k_back_rope_s0-1-2`."""
        first = self.cells[0]
        stem = first.cell_id.removesuffix(f"_s{first.seed}")
        return f"{stem}_s{'-'.join(str(c.seed) for c in self.cells)}"


def _key(cell: Cell, work_dir: Path) -> tuple[str, str | None, float]:
    cfg = cell_config(cell, build_task(cell.task), work_dir)
    flops = model_stats(cfg.model, cfg.pe, "cpu").flops_per_token_train * cfg.train.target_budgets[-1]
    shared = to_dict(cfg)
    shared.pop("seed")
    shared["train"].pop("run_name")
    key = json.dumps([shared, to_dict(cell.task), to_dict(cell.study.eval)], sort_keys=True, default=str)
    return key, why_not_batched(cfg), flops


def seed_groups(cells: list[Cell], workers: int = 1, batch: bool = True) -> list[SeedGroup]:
    """`cells` as groups, longest first (by training FLOPs; grid order among equals): cells equal but for
    their seed together (at most MAX_MEMBERS), the others alone with the reason. Groups are split further
    while there are fewer of them than `workers`, so no worker idles (three seeds on two workers: two jobs).
    `batch=False`: every cell alone, in grid order."""
    if not batch:
        return [SeedGroup([c], "seed batching not asked for (--batch-seeds)") for c in cells]
    by_key: dict[str, SeedGroup] = {}
    groups: list[SeedGroup] = []
    with tempfile.TemporaryDirectory() as tmp:  # cell_config names a work dir; nothing is written
        for cell in cells:
            key, reason, flops = _key(cell, Path(tmp))
            if reason is not None:
                groups.append(SeedGroup([cell], reason, flops))
                continue
            group = by_key.get(key)
            if group is None or len(group.cells) >= MAX_MEMBERS:
                group = by_key[key] = SeedGroup([], None, flops)
                groups.append(group)
            group.cells.append(cell)
    while groups and len(groups) < workers:
        largest = max(groups, key=lambda g: len(g.cells))
        if len(largest.cells) < 2:
            break
        half = len(largest.cells) // 2
        i = groups.index(largest)
        groups[i:i + 1] = [SeedGroup(largest.cells[:half], None, largest.cell_flops),
                           SeedGroup(largest.cells[half:], None, largest.cell_flops)]
    # longest first (LPT): a long group started last would leave the other workers idle at the end
    return sorted(groups, key=lambda g: -g.flops)
