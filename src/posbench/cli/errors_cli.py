"""One top-level error handler for every command-line entry point.

An expected failure is a `posbench.errors.PosbenchError` (a malformed YAML file, a wrong override, a path
the user gave that the OS refuses, a corrupt checkpoint, a non-finite loss): it prints one line
`error: ...` on stderr and exits with the class's code; the traceback is shown only with `--debug` or
`POSBENCH_DEBUG=1`, because a researcher needs the fix, not the call stack. Anything else is a bug in our
code (a plain ValueError or a missing file inside our own code included) and keeps its traceback: Python
exits with code 1.

Exit codes (posbench/errors.py, documented in docs/architecture.md):
    2  bad input: config, flag, path, data or YAML error
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

from posbench.errors import EXIT_DISK_FULL, ConfigError, PosbenchError
from posbench.registry import add_plugins


def debug_requested(argv: Sequence[str]) -> bool:
    return "--debug" in argv or os.environ.get("POSBENCH_DEBUG", "") not in ("", "0")


def one_line(exc: BaseException) -> str:
    """The exception's message on one line (YAML errors span several; tracebacks never reach users)."""
    text = str(exc) or type(exc).__name__
    parts = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(parts)


def exit_code(exc: BaseException) -> int | None:
    """The documented exit code of an expected failure, None for a bug (which keeps its traceback)."""
    if isinstance(exc, PosbenchError):
        return exc.exit_code
    # A full disk is never our bug, wherever the write was (shards, results, a plot): one errno check here
    # instead of a wrapper around every writer.
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return EXIT_DISK_FULL
    return None


def split_plugins(argv: list[str]) -> tuple[list[str], list[str]]:
    """(argv without its `--plugin MODULE` / `--plugin=MODULE` options, those modules)."""
    rest, plugins, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--plugin":
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                raise ConfigError("--plugin needs a module name, e.g. --plugin my_pes.learned_alibi")
            plugins.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith("--plugin="):
            plugins.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
        i += 1
    return rest, plugins


def cli_entry(main: Callable[[list[str] | None], int | None]) -> Callable[[list[str] | None], int]:
    """Wrap `main(argv) -> exit code` with the shared handler; strips `--debug` and `--plugin MODULE` (a module of
    PEs, tasks or suites to import first: posbench/registry.py) before parsing."""

    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        argv = list(sys.argv[1:] if argv is None else argv)
        debug = debug_requested(argv)
        argv = [a for a in argv if a != "--debug"]
        try:
            argv, plugins = split_plugins(argv)
            add_plugins(plugins)
            return int(main(argv) or 0)
        except Exception as e:  # noqa: BLE001 - classified below; a bug re-raises with its traceback
            code = exit_code(e)
            if code is None:
                raise
            if debug:
                traceback.print_exc()
            print(f"error: {one_line(e)}", file=sys.stderr)
            return code

    return wrapped
