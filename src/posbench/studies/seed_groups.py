"""Which study cells train together as one batched model (studies/batched_train.py): those whose settings
differ only in seed, and rows of one architecture whose PEs are one family with tensors of the same names and
shapes (RoPE at two bases): their parameters stack. The grouping compares what decides a cell's training and
scoring (its resolved RunConfig without seed, run name and PE options, the PE's family and tensor shapes, its
task, the study's eval settings), never names. Whether PE options that stack in shape also stack in meaning (an
option may change the code, not a tensor) is checked when the group is built (`batched_train.MembersDiffer`);
the cells of such a group then train as one group per PE (studies/cell.py)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from posbench.config_loader import to_dict
from posbench.data.tasks.task import build_task
from posbench.model.build import build_model
from posbench.model.flops import model_stats
from posbench.studies.batched_train import why_not_batched
from posbench.studies.cell_config import cell_config
from posbench.studies.study_spec import Cell
from posbench.studies.training_twins import twin_sets
from posbench.training.device import device_type_for

# members per group, by train.device: on CPU beyond a handful a group only makes fewer, longer jobs to share out;
# a GPU runs a study model launch-bound, so there a group is as wide as the card's memory allows (a quickstart row
# at 32 seeds holds well under 1 GB)
MAX_MEMBERS = {"cpu": 8, "cuda": 32}


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
        """The group's job and log name: the cells' shared id with every seed, e.g. `k_back_rope_s0-1-2`; for
        rows of several PEs, the first row's with how many more, e.g. `k_back_rope_and_1_s0-1-0-1`."""
        stems = list(dict.fromkeys(c.cell_id.removesuffix(f"_s{c.seed}") for c in self.cells))
        more = f"_and_{len(stems) - 1}" if len(stems) > 1 else ""
        return f"{stems[0]}{more}_s{'-'.join(str(c.seed) for c in self.cells)}"


_SHAPES: dict[str, list] = {}  # per distinct (model, PE) setting: models are built once per process


def shapes_of(cfg) -> list:
    """The PE's family and the (name, shape) of every parameter and buffer of the model `cfg` builds: what must
    agree for two rows' tensors to stack. The caller's RNG is left where it was."""
    setting = json.dumps([to_dict(cfg.model), to_dict(cfg.pe)], sort_keys=True, default=str)
    if setting not in _SHAPES:
        with torch.random.fork_rng(devices=[]):
            model = build_model(cfg.model, cfg.pe, "cpu", 0)
        tensors = [*model.named_parameters(), *model.named_buffers()]
        _SHAPES[setting] = [to_dict(cfg.pe)["name"], [[name, list(t.shape)] for name, t in tensors]]
    return _SHAPES[setting]


def _key(cell: Cell, work_dir: Path) -> tuple[str, str | None, float, str]:
    cfg = cell_config(cell, build_task(cell.task), work_dir)
    flops = model_stats(cfg.model, cfg.pe, "cpu").flops_per_token_train * cfg.train.target_budgets[-1]
    shared = to_dict(cfg)
    shared.pop("seed")
    shared["train"].pop("run_name")
    shared["pe"] = shapes_of(cfg)  # the PE's family and tensor shapes, not its options
    key = json.dumps([shared, to_dict(cell.task), to_dict(cell.study.eval)], sort_keys=True, default=str)
    return key, why_not_batched(cfg), flops, device_type_for(cfg)


def seed_groups(cells: list[Cell], workers: int = 1, batch: bool = True) -> list[SeedGroup]:
    """`cells` as groups, longest first (by training FLOPs; grid order among equals): cells equal but for
    their seed and stackable PE options together (at most MAX_MEMBERS of their device), the others alone with
    the reason. Groups are split further while there are fewer of them than `workers`, so no worker idles (three
    seeds on two workers: two jobs). `batch=False`: every cell alone, in grid order, but training twins
    (studies/training_twins.py) in one job: it trains them once, unbatched."""
    if not batch:
        with tempfile.TemporaryDirectory() as tmp:  # cell_config names a work dir; nothing is written
            cfgs = [cell_config(c, build_task(c.task), Path(tmp)) for c in cells]
        return [SeedGroup([cells[i] for i in members], "seed batching not asked for (--batch-seeds)")
                for members in twin_sets(cfgs)]
    by_key: dict[str, SeedGroup] = {}
    groups: list[SeedGroup] = []
    with tempfile.TemporaryDirectory() as tmp:  # cell_config names a work dir; nothing is written
        for cell in cells:
            key, reason, flops, device = _key(cell, Path(tmp))
            if reason is not None:
                groups.append(SeedGroup([cell], reason, flops))
                continue
            group = by_key.get(key)
            if group is None or len(group.cells) >= MAX_MEMBERS[device]:
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
