"""The evaluator contract: one small registered class per suite, one file each, chosen with --suite.

    plan     Evaluator(cfg, target)        checks options and loads data. The runner plans every
                                           checkpoint before any model runs, so a bad path, option or
                                           data file fails in seconds, not after an hour of evaluation
    run      evaluator.run(session)        -> a JSON-able dict; None wherever the PE cannot represent
                                           a length (a learned table too short): "n/a", never clamped
    report   markdown(result), comparison(results), plots(results, out_dir)   (classmethods: the
                                           comparison of several checkpoints needs no live evaluator)

`work()` counts the items (windows, prompts) `run` will process, so one progress bar spans the suites.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

import torch
from torch import nn

from posbench.config import RunConfig
from posbench.config_loader import ConfigError, nearest
from posbench.data.tokenizers import Tokenizer
from posbench.registry import Registry


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


class Evaluator:
    name: ClassVar[str] = ""
    title: ClassVar[str] = ""

    def __init__(self, cfg, target: Target):
        self.cfg = cfg
        self.target = target

    def work(self) -> int:
        raise NotImplementedError

    def run(self, session: Session) -> dict:
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


def _check(name: str, cls) -> None:
    if not cls.title:
        raise TypeError(f"{cls.__name__} needs a `title`")


SUITES = Registry("suite", _check)


def get_suite(name: str) -> type[Evaluator]:
    if name not in SUITES:  # `all` is a name too (suites.ALL), so the nearest-name list includes it
        raise ConfigError(f"unknown suite `{name}`" + nearest(name, [*SUITES, "all"]))
    return SUITES[name]


def suite_names() -> list[str]:
    return list(SUITES)


# -- small formatting helpers shared by the suites' reports ------------------------------------------------

def fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def decode(tokenizer: Tokenizer, ids: list[int]) -> str:
    """Text of generated ids. A model's vocabulary is often larger than its tokenizer's (rounded up, or
    the 512-id nano model on 257 byte tokens): ids the tokenizer does not have read as U+FFFD, so such
    an answer is simply wrong instead of crashing the evaluation."""
    out, run = [], []
    for i in ids:
        if 0 <= i < tokenizer.vocab_size:
            run.append(i)
            continue
        out += [tokenizer.decode(run), "\ufffd"]
        run = []
    return "".join(out) + tokenizer.decode(run)


def short_reason(err: Exception) -> str:
    """The first sentence of a PositionRangeError: what the table holds, not the advice."""
    return str(err).split(". ")[0]
