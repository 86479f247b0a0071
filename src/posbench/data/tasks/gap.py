"""Tasks that recall something across a gap of filler (copy_distance, passkey): `context` is the training
context in task tokens, and the distances of `id_range` / `ood_range` are fractions of the room it leaves for
filler after the task's fixed tokens, so ID examples fit in `context` and OOD ones run past it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from posbench.data.tasks.task import Task, TaskConfig, require


@dataclass
class GapConfig(TaskConfig):
    context: int = 256  # training context in task tokens: ID examples never exceed it
    id_range: tuple[float, float] = (0.25, 1.0)  # distance to recall across / room for filler
    ood_range: tuple[float, float] = (1.5, 2.0)
    range_min: ClassVar[float] = 0.0  # fractions; check_gap_config wants a whole distance >= 1

    def fixed_tokens(self) -> int:
        """Tokens of an example that are not filler (markers and what is recalled)."""
        raise NotImplementedError

    @property
    def room(self) -> int:
        return self.context - self.fixed_tokens()

    def check(self) -> None:
        super().check()
        check_gap_config(self, self.fixed_tokens())


class GapTask(Task):
    Config = GapConfig

    @property
    def room(self) -> int:
        return self.cfg.room

    def max_tokens(self, split: str) -> int:
        return gap_bounds(self.cfg.split_range(split), self.room)[1] + self.cfg.fixed_tokens()


def gap_bounds(frac_range: tuple, room: int) -> tuple[int, int]:
    """Integer distances whose fraction of `room` lies in frac_range (passkey, copy_distance)."""
    lo, hi = math.ceil(frac_range[0] * room - 1e-9), math.floor(frac_range[1] * room + 1e-9)
    return lo, hi


def sample_gap(rng: np.random.Generator, frac_range: tuple, room: int) -> tuple[int, int]:
    """(prefix, gap): gap uniform over gap_bounds, prefix uniform in what is left of [0, high * room], so
    the thing to recall sits at varying absolute positions and an example never exceeds high * room."""
    lo, hi = gap_bounds(frac_range, room)
    gap = int(rng.integers(lo, hi + 1))
    return int(rng.integers(hi - gap + 1)), gap


def check_gap_config(cfg: TaskConfig, overhead: int) -> None:
    """`context` leaves room for filler after `overhead` fixed tokens; every range holds an integer gap."""
    room = cfg.context - overhead
    require(room >= 4, f"task `{cfg.name}`: context={cfg.context} leaves {room} filler tokens after the "
                       f"{overhead} fixed ones; use context >= {overhead + 4}")
    for field in ("id_range", "ood_range"):
        lo, hi = gap_bounds(getattr(cfg, field), room)
        require(getattr(cfg, field)[0] > 0 and 1 <= lo <= hi,
                f"task `{cfg.name}`: {field}={list(getattr(cfg, field))} (fractions of the {room} filler "
                f"tokens) holds no whole distance >= 1; widen it or raise context")
