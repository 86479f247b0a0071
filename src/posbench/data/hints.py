"""The data commands an error message tells the user to run, spelled with the data config they gave.

A missing shard or tokenizer is found deep in the data stage, which never sees the command line. The command
that runs (`posbench train`, `posbench data ...`) says what it was given once, `with config_args(...)`; a hint
then names the command with the same YAML files and `data.*` overrides:

    no tokenized `train` shards in data/tokens/mycorpus/bytes; run `posbench data tokenize mydata.yaml`
    (local files: nothing to download)

Outside a command (a library call, a sweep) the hint says what to pass instead of guessing.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

_GIVEN: ContextVar[tuple[str, ...] | None] = ContextVar("posbench_data_config_args", default=None)
LOCAL_EXAMPLE = "configs/data/local_example.yaml"


def data_sources(sources: Sequence[str]) -> list[str]:
    """Of a command's positionals, what the data commands need again: YAML files and `data.*` overrides."""
    return [s for s in sources if "=" not in s or s.startswith("data.")]


@contextmanager
def config_args(args: Sequence[str]) -> Iterator[None]:
    """While a command runs: the data-config arguments it was given (files, `data.*` overrides, `--data X`)."""
    token = _GIVEN.set(tuple(args))
    try:
        yield
    finally:
        _GIVEN.reset(token)


def given() -> tuple[str, ...] | None:
    """The running command's data-config arguments; None outside a command."""
    return _GIVEN.get()


def data_command(verb: str) -> str:
    """`posbench data VERB ...` with the running command's data config, shell-quoted."""
    args = given()
    if args is None:
        return f"posbench data {verb} <the YAML files and data.* overrides you train with>"
    return " ".join(["posbench", "data", verb, *(shlex.quote(a) for a in args)])


def prepare_hint(downloadable: bool) -> str:
    """What makes the token shards of the running command's data config."""
    if not downloadable:
        return f"run `{data_command('tokenize')}` (local files: nothing to download)"
    hint = f"run `{data_command('download')}` then `{data_command('tokenize')}`"
    return hint + defaults_note()


def defaults_note() -> str:
    """Said when a data command was given no config at all: it used the defaults, FineWeb-Edu from the hub."""
    if given() != ():
        return ""
    return (f" (no data config given, so these are the defaults: FineWeb-Edu from the hub; for your own files pass "
            f"their YAML, e.g. `posbench data tokenize {LOCAL_EXAMPLE}`)")


def inputs_hint(downloadable: bool, n_files: int) -> str:
    """What to do when a split has no input files on disk."""
    if downloadable:
        return f"run `{data_command('download')}` first" + defaults_note()
    files = f"{n_files} file{'s' if n_files != 1 else ''}"
    return (f"data.source.paths match {files} (numbered 0..{n_files - 1} in sorted order); add files or change "
            "data.splits so that each of train and val gets one")
