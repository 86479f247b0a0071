"""One top-level error handler for every command-line entry point.

Bad input (a malformed YAML file, a wrong override, an unreadable path, a corrupt checkpoint) prints
one line `error: ...` on stderr and exits non-zero; the traceback is shown only with `--debug` or
`POSBENCH_DEBUG=1`, because a researcher needs the fix, not the call stack.

Exit codes (documented in docs/architecture.md):
    2  bad input: config, data, YAML, value or file-system error
    3  training diverged (non-finite loss)
    4  checkpoint missing, corrupt or incompatible
    5  disk full (ENOSPC) while writing
"""

from __future__ import annotations

import errno
import functools
import os
import sys
import traceback
from collections.abc import Callable, Sequence

EXIT_BAD_INPUT = 2
EXIT_NON_FINITE = 3
EXIT_CHECKPOINT = 4
EXIT_DISK_FULL = 5


def debug_requested(argv: Sequence[str]) -> bool:
    return "--debug" in argv or os.environ.get("POSBENCH_DEBUG", "") not in ("", "0")


def one_line(exc: BaseException) -> str:
    """The exception's message on one line (YAML errors span several; tracebacks never reach users)."""
    text = str(exc) or type(exc).__name__
    parts = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(parts)


def exit_code(exc: BaseException) -> int | None:
    """The documented exit code of an expected failure, None for a bug (which keeps its traceback)."""
    import yaml

    from posbench.config_loader import ConfigError
    from posbench.data.errors import DataError

    disk_full = _optional("posbench.training.checkpoint", "DiskFullError")
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC or disk_full and isinstance(exc, disk_full):
        return EXIT_DISK_FULL
    # Imported lazily: posbench.training pulls in torch, which a data-only command does not need yet.
    checkpoint_error = _optional("posbench.training.checkpoint", "CheckpointError")
    non_finite = _optional("posbench.training.loop", "NonFiniteError")
    if checkpoint_error is not None and isinstance(exc, checkpoint_error):
        return EXIT_CHECKPOINT
    if non_finite is not None and isinstance(exc, non_finite):
        return EXIT_NON_FINITE
    if isinstance(exc, (ConfigError, DataError, yaml.YAMLError, ValueError, OSError, UnicodeDecodeError)):
        return EXIT_BAD_INPUT
    return None


def _optional(module: str, name: str):
    mod = sys.modules.get(module)
    return getattr(mod, name, None) if mod is not None else None


def cli_entry(main: Callable[[list[str] | None], int | None]) -> Callable[[list[str] | None], int]:
    """Wrap `main(argv) -> exit code` with the shared handler; strips `--debug` before parsing."""

    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        argv = list(sys.argv[1:] if argv is None else argv)
        debug = debug_requested(argv)
        argv = [a for a in argv if a != "--debug"]
        try:
            return int(main(argv) or 0)
        except Exception as e:  # noqa: BLE001 - classified below; unknown errors re-raise
            code = exit_code(e)
            if code is None:
                raise
            if debug:
                traceback.print_exc()
            print(f"error: {one_line(e)}", file=sys.stderr)
            return code

    return wrapped
