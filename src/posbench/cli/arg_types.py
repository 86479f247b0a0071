"""argparse types for counts and numbers, shared by the commands and scripts/*.py: a bad count (`--cells -1`,
`--steps 0`) or number (`--mb -1`, `--depths abc`) is argparse's usage error (exit code 2, naming the flag) at parse
time, never a silently dropped cell, an empty loop or a ZeroDivisionError later."""

from __future__ import annotations

import argparse
import math


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r:.40} is not an integer") from None


def _require(value, ok: bool, rule: str):
    if not ok:
        shown = value if isinstance(value, int) else f"{value:g}"
        raise argparse.ArgumentTypeError(f"{shown} must be {rule}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (steps, cells, workers, batch sizes)."""
    value = _int(text)
    return _require(value, value >= 1, ">= 1")


def thread_count(text: str) -> int:
    """An intra-op thread count for the bench scripts, 0 (torch's default) or 1 .. threads.MAX_THREADS: the bound
    train.threads and eval's --threads are checked against (posbench/threads.py)."""
    from posbench.threads import thread_problem

    value = _int(text)
    _require(value, value >= 0, ">= 0")
    problem = thread_problem(value) if value else ""
    if problem:
        raise argparse.ArgumentTypeError(f"{value} {problem}")
    return value


def positive_thread_count(text: str) -> int:
    """`thread_count` without 0: for a script whose default is a set count, not torch's."""
    value = thread_count(text)
    return _require(value, value >= 1, ">= 1")


def threads_setting(text: str) -> int | str:
    """eval's --threads: `auto` or an integer, typed here; its range is EvalConfig's check (posbench/threads.py)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r:.40} is not a count or auto") from None


def count(text: str) -> int:
    """An integer >= 0 (warmup steps, repeats that may be none)."""
    value = _int(text)
    return _require(value, value >= 0, ">= 0")


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r:.40} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r:.40} is not a finite number")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (megabytes of text, a size limit)."""
    value = _float(text)
    return _require(value, value > 0, "> 0")


def nonnegative_float(text: str) -> float:
    """A finite number >= 0 (a time budget where 0 means the default)."""
    value = _float(text)
    return _require(value, value >= 0, ">= 0")


def fraction_list(text: str) -> list[float]:
    """Comma-separated fractions in [0, 1] (`0.0,0.5,1.0`: depths in a context)."""
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part.strip()!r:.40} is not a number (give fractions like "
                                             "0.0,0.5,1.0)") from None
        if not 0 <= value <= 1:
            raise argparse.ArgumentTypeError(f"{part.strip():.40} is not in [0, 1]")
        values.append(value)
    return values
