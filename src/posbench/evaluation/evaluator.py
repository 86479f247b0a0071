"""The evaluator contract: one small registered class per suite, one file each, chosen with --suite.

    plan     Evaluator(cfg, target)        checks options and loads data. The runner plans every
                                           checkpoint before any model runs, so a bad path, option or
                                           data file fails in seconds, not after an hour of evaluation
    run      evaluator.run(session)        -> a JSON-able dict; None wherever the PE cannot represent
                                           a length (a learned table too short): "n/a", never clamped
    report   markdown(result), comparison(results), plots(results, out_dir)   (classmethods: the
                                           comparison of several checkpoints needs no live evaluator)

`work()` counts the items (windows, prompts) `run` will process, so one progress bar spans the suites.
The registry of suites is `suite_registry.py` (`@SUITES.register("name")`); every module of `suites/` is one
suite; report helpers are `markdown.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

import torch
from torch import nn

from posbench.config import RunConfig
from posbench.data.tokenizers import Tokenizer
from posbench.evaluation.dope import Dope, NoDope


class Progress(Protocol):
    def update(self, n: int = 1) -> object: ...


class NullProgress:
    def update(self, n: int = 1) -> None:
        pass


@dataclass
class Target:
    """What an evaluator knows about a checkpoint when it is planned (no weights loaded yet)."""

    label: str  # short name in tables and legends
    path: Path  # the resolved step directory
    run_cfg: RunConfig
    tokenizer: Tokenizer
    lengths: list[int]  # context lengths in tokens, ascending
    seed: int
    batch_size: int
    max_positions: int | None = None  # the PE's position range (None: any length); beyond it cells are n/a

    @property
    def train_len(self) -> int:
        return self.run_cfg.model.seq_len


@dataclass
class Session:
    """What an evaluator gets to run: the model in eval mode on its device."""

    model: nn.Module
    device: torch.device
    autocast: Callable[[], AbstractContextManager]
    progress: Progress
    # --dope (evaluation/dope.py): a suite scores each length inside `dope.at(model, L, rows, name)`
    dope: Dope | NoDope = field(default_factory=NoDope)


class Evaluator:
    name: ClassVar[str] = ""  # given by @SUITES.register
    title: ClassVar[str] = ""
    options: ClassVar[type]  # the suite's config dataclass: EvalConfig's field of the suite's name
    order: ClassVar[int] = 100  # place in `--suite all`, reports and EvalConfig
    in_all: ClassVar[bool] = True  # part of `--suite all`
    # the options field that counts one cell's items (examples, prompts, windows; 0 = all), which `--limit N`
    # caps: items are indexed 0, 1, ... so the capped run asks the first N of the full one
    per_cell: ClassVar[str] = ""
    # whether the suite scores each length inside `session.dope.at` with rows of its data (`calibration_rows`):
    # --dope refuses the others before any work
    calibrates_dope: ClassVar[bool] = False

    def __init__(self, cfg, target: Target):
        self.cfg = cfg
        self.target = target

    def work(self) -> int:
        raise NotImplementedError

    @classmethod
    def limited(cls, options, n: int):
        """`options` with at most `n` items per cell (`--limit`)."""
        current = getattr(options, cls.per_cell)
        return dataclasses.replace(options, **{cls.per_cell: n if current == 0 else min(current, n)})

    @classmethod
    def forward_rows(cls, options, target: Target, L: int) -> int:
        """Rows (prompts, windows) one forward takes at length L, for eval.py's memory check before the suite is
        built (evaluation/lengths.py): by default a batch of `batch_size` (generation batches prompts of one length)."""
        return target.batch_size

    @classmethod
    def held_bytes(cls, options, target: Target, L: int, attention_layers: int) -> int:
        """Bytes the suite keeps beside one forward at length L (what it collects from the model's layers), for the
        same check; `attention_layers`: the model's layers with attention (0 for Mamba). By default none: a suite
        reads the forward's output and lets it go."""
        return 0

    def run(self, session: Session) -> dict:
        raise NotImplementedError

    def calibration_rows(self, L: int, n: int, seed: int) -> torch.Tensor:
        """(n, L) token ids of this suite's data at length L drawn with `seed` (DoPE's calibration sequences)."""
        raise NotImplementedError

    @classmethod
    def markdown(cls, result: dict) -> str:
        raise NotImplementedError

    @classmethod
    def comparison(cls, results: dict[str, dict]) -> str:
        """One markdown section comparing checkpoints (label -> this suite's result)."""
        raise NotImplementedError

    @classmethod
    def plots(cls, results: dict[str, dict], out_dir: Path) -> list[Path]:
        return []
