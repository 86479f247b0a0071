"""Atomic file writes (temp file in the same folder, fsync, os.replace) and a folder lock.

Why: a run killed at any instant must leave either the old file or the complete new one, never a
torn file that a later run mistakes for finished work. Temp files are hidden (`.name.XXXX.tmp`) so a
glob for outputs never sees them; `remove_stale_temps` clears those a killed run left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from posbench.errors import DataError, user_paths

TEMP_SUFFIX = ".tmp"


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """Yield a file object; on clean exit it replaces `path` atomically, on error it vanishes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    os.fchmod(fd, 0o644)  # mkstemp makes 0600 files; data files are meant to be shared
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def fsync_dir(folder: str | Path) -> None:
    """Make a rename in `folder` durable: without it a power cut can lose the new directory entry."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: str | Path, text: str) -> None:
    """`text` as the whole of `path`, atomically (the one temp-file-then-replace writer for text)."""
    with atomic_open(path, "w") as f:
        f.write(text)


def write_json(path: str | Path, obj) -> None:
    with atomic_open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def read_json(path: str | Path, default=None):
    """Parse a JSON file we wrote; `default` when it does not exist; a clear error when corrupt."""
    path = Path(path)
    if not path.exists():
        return default
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path} is not valid JSON ({e}); delete it and re-run the step that "
                        "writes it (finished files are re-verified, not re-done blindly)") from None


def remove_stale_temps(folder: Path) -> int:
    """Delete temp files a killed run left in `folder` (call while holding its DirLock)."""
    n = 0
    for tmp in folder.rglob(f".*{TEMP_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            n += 1
    return n


class DirLock:
    """Exclusive advisory lock on `folder/.lock`, so two runs never write the same outputs.

    The kernel drops the lock when the process dies, so a killed run never blocks the next one.
    """

    def __init__(self, folder: str | Path, what: str):
        self.path = Path(folder) / ".lock"
        self.what = what
        self._fd: int | None = None

    def __enter__(self) -> DirLock:
        with user_paths():  # the locked folder is an output folder the user named (data.root, train.out_dir)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
            holder = self.path.read_text(errors="replace").strip() or "unknown process"
            raise DataError(f"another {self.what} run ({holder}) is using {self.path.parent} (it holds "
                            f"{self.path}); wait for it to finish, or stop it first") from None
        # Who holds it, for the message a second run prints (the flock itself is the lock).
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
