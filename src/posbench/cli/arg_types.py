"""argparse types for counts, shared by the commands and scripts/*.py: a bad count (`--cells -1`, `--steps 0`) is
argparse's usage error (exit code 2, naming the flag) at parse time, never a silently dropped cell, an empty loop or
a ZeroDivisionError later."""

from __future__ import annotations

import argparse


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r:.40} is not an integer") from None


def positive_int(text: str) -> int:
    """An integer >= 1 (steps, cells, workers, batch sizes)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def count(text: str) -> int:
    """An integer >= 0 (warmup steps, repeats that may be none)."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return value
