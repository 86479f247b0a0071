"""The errors a user can cause, each carrying its exit code (design rule: an error carries its exit code).

The bottom layer: it imports nothing from posbench, so every stage can raise these and the one CLI handler
(`posbench.cli.errors_cli`) can catch them by class, without knowing which stage raised them. A
`PosbenchError` is an expected failure: the command prints `error: <message>` on one line and exits with
`exit_code`. Every other exception is a bug in our code and keeps its traceback (exit code 1), a missing
file inside our own code included: it is not the user's bad input.

Exit codes, the same for every command (tests/cli/test_exit_codes.py runs each kind through each command):
    2  bad input: a config, flag, path, data file or YAML the user gave is wrong
    3  training diverged (a non-finite loss while training)
    4  checkpoint missing, corrupt or incompatible: truncated or not a PyTorch file, Python objects other than
       tensors (refused unread), tensors that do not fit its config.yaml, a damaged config.yaml or meta.json,
       and weights that are not finite (NaN/inf: refused when loaded, for training, evaluation and export
       alike, naming the tensors; a checkpoint is never evaluated into "n/a" cells)
    5  disk full (ENOSPC) while writing

A message shows a value the user gave through `brief(value)`, never `repr(value)`: a config's value can be
anything YAML can build, and an error message must not be the thing that exhausts memory.

Builtin bases: each class also derives from the builtin exception it replaced (`ConfigError` a ValueError,
`DataError` a RuntimeError, `UserPathError` an OSError with the OS's errno, `CheckpointError` a ConfigError
and a RuntimeError, `NonFiniteError` a RuntimeError), so callers and tests that catch the builtin keep
working. The handler decides by `PosbenchError` alone: a plain ValueError or OSError is a bug.
"""

from __future__ import annotations

import contextlib
import errno
import os
import reprlib
from collections.abc import Iterator
from typing import ClassVar

EXIT_BUG = 1  # Python's own exit code for an uncaught exception
EXIT_BAD_INPUT = 2
EXIT_NON_FINITE = 3
EXIT_CHECKPOINT = 4
EXIT_DISK_FULL = 5


class PosbenchError(Exception):
    """An expected failure with a user-facing message (`str(e)`: what is wrong and what to do)."""

    exit_code: ClassVar[int] = EXIT_BAD_INPUT

    @property
    def message(self) -> str:
        return str(self) or type(self).__name__


class BadInputError(PosbenchError):
    """Something the user gave (a config, a flag, a path, a data file) is wrong; exit code 2."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(BadInputError, ValueError):
    """A configuration value or key is invalid; the message says what to change. A ValueError as it always was
    (callers that validate a value catch ValueError)."""


class DataError(BadInputError, RuntimeError):
    """A data file or data step is wrong; the message names the file and the fix. A RuntimeError as it was."""


class ShardError(DataError):
    """A token shard fails validation (header, size, token ids, tokenizer fingerprint)."""


class DownloadError(DataError):
    """A file could not be downloaded and verified."""


class UserPathError(BadInputError, OSError):
    """The OS refused a path the user gave (missing, not a directory, no permission). Raised from the OSError
    at the place that knows the path is the user's (`user_path_error`), keeping its errno and message, so
    `except OSError` still catches it."""


class NonFiniteError(PosbenchError, RuntimeError):
    """Training produced a non-finite loss; exit code 3."""

    exit_code = EXIT_NON_FINITE


class CheckpointError(ConfigError, RuntimeError):
    """A checkpoint is missing, unreadable or does not match its own config; the message names it. One class
    for training (resume, save) and evaluation (loading): a ConfigError, since the input is wrong, and a
    RuntimeError, as a failed save always was; exit code 4."""

    exit_code = EXIT_CHECKPOINT


class DiskFullError(CheckpointError):
    """No space left while writing (a checkpoint, shards, results); exit code 5."""

    exit_code = EXIT_DISK_FULL


class _Brief(reprlib.Repr):
    """reprlib's bounded repr (a few items per container, a few levels), with integers of any size."""

    def __init__(self):
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxtuple, self.maxset = 3, 4, 6, 6, 6
        self.maxstring, self.maxlong, self.maxother = 60, 40, 60

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:  # repr() of an int past 4300 digits raises ValueError
            return f"<an integer of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_BRIEF = _Brief()


def brief(value: object, limit: int = 100) -> str:
    """`repr(value)` for an error message, bounded whatever the value: at most a few items of each container
    and a few levels deep (so a YAML alias bomb is never expanded), then cut to `limit` characters with an
    ellipsis. The one way a message shows a value the user gave."""
    return clip(_BRIEF.repr(value), limit)


def clip(text: str, limit: int = 100) -> str:
    """`text` cut to `limit` characters with an ellipsis: text the user typed, quoted in a message."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def user_path_error(e: OSError, what: str = "") -> PosbenchError:
    """The PosbenchError for an OSError on a path the user gave: DiskFullError for ENOSPC, else a UserPathError
    with the same errno and text (`[Errno 20] Not a directory: 'runs/x'`), after `what: ` when given.
    Use as `raise user_path_error(e) from e`."""
    if isinstance(e, PosbenchError):  # already classified (a UserPathError is an OSError too)
        return e
    text = f"{what}: {e}" if what else str(e)
    if e.errno == errno.ENOSPC:
        return DiskFullError(text)
    if what or e.errno is None:
        err = UserPathError(text)
        err.errno = e.errno  # only the number: OSError's str() would otherwise rebuild the text without `what`
        return err
    return UserPathError(e.errno, e.strerror or os.strerror(e.errno), e.filename,
                         *((None, e.filename2) if e.filename2 is not None else ()))


@contextlib.contextmanager
def user_paths(what: str = "") -> Iterator[None]:
    """Every OSError inside is about a path the user gave (an output directory, a file to read): re-raised as
    `user_path_error(e, what)`. Wrap only such code: an OSError on a file of our own making is a bug."""
    try:
        yield
    except PosbenchError:
        raise
    except OSError as e:
        raise user_path_error(e, what) from e


def brief_key(k) -> str:
    """A mapping key as messages show it: a string clipped, anything else bounded by `brief`."""
    return clip(k, 40) if isinstance(k, str) else brief(k, 40)
