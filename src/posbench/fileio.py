"""Atomic file writes (temp file in the same folder, fsync, os.replace), a folder lock, and opening files
without following symbolic links.

Why: a run killed at any instant must leave either the old file or the complete new one, never a
torn file that a later run mistakes for finished work. Temp files are hidden (`.name.XXXX.tmp`) so a
glob for outputs never sees them; `remove_stale_temps` clears those a killed run left behind.

Links (design rule: bounded): data roots, run dirs and export dirs may sit on shared storage, where anyone who
can write there could plant `metrics.jsonl -> ~/.bashrc` and have our write land in someone else's file. So
every file we write there is opened with O_NOFOLLOW (`open_fd`, `open_append`, `open_new`, the `.lock`) and a
link in its place is refused with `LinkError` naming it; an atomic write creates its temp file with
O_EXCL|O_NOFOLLOW (mkstemp) and renames it over the path, which replaces a link itself, never its target.
The folders the user names (data.root, train.out_dir, an export dir's parent) may be links; what we create
below them is checked (`no_link`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from posbench.errors import DataError, UserPathError, user_paths

TEMP_SUFFIX = ".tmp"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class LinkError(UserPathError):
    """A file or folder we would write is a symbolic link (exit code 2): refused, its target untouched."""


def link_error(path: str | Path) -> LinkError:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    err = LinkError(f"{path} is a symbolic link (to {target}); refusing to write through it (on shared storage "
                    "a planted link could redirect the write into any file you can write). Remove the link and "
                    "re-run")
    err.errno = errno.ELOOP
    return err


def no_link(path: str | Path) -> Path:
    """`path`, after checking that it is not a symbolic link (it may be missing); LinkError if it is."""
    if os.path.islink(path):
        raise link_error(path)
    return Path(path)


def no_link_below(root: str | Path, path: str | Path) -> Path:
    """`path`, after checking that no folder between `root` (the user's, which may be a link) and `path` (both
    ends included but root) is a symbolic link, e.g. a run directory's `eval/` pointing elsewhere; LinkError naming
    the first one. Missing folders are fine: we create them."""
    root, path = Path(root), Path(path)
    for part in path.relative_to(root).parts:
        root = no_link(root / part)
    return path


def open_fd(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """os.open without following a link at `path` (LinkError naming it instead)."""
    try:
        return os.open(path, flags | _NOFOLLOW, mode)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EEXIST, errno.EMLINK) and os.path.islink(path):
            raise link_error(path) from None
        raise


def open_append(path: str | Path, mode: str = "a") -> IO:
    """A file opened for appending (created 0644 if missing), never through a link."""
    return os.fdopen(open_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), mode)


def open_read(path: str | Path, mode: str = "rb") -> IO:
    """A file opened for reading, never through a link (LinkError naming it): a planted link cannot make us read,
    or show, another file as ours."""
    return os.fdopen(open_fd(path, os.O_RDONLY), mode)


def read_text_bounded(path: str | Path, limit: int, what: str) -> str:
    """The text of one of our files (a status, a pid, a spec, metrics.jsonl), read without following a link and
    refused (DataError) past `limit` bytes before it is read; the read itself stops at limit + 1 bytes, should
    the file grow meanwhile."""
    with open_read(path) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        raise DataError(f"{path}: {max(size, len(data)):,} bytes is more than {what} holds (at most {limit:,}); "
                        "it is not a file this program wrote whole: move it aside and re-run")
    return data.decode("utf-8", errors="replace")


def bounded_lines(f: IO, path: str | Path, max_line_bytes: int) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a binary file, each line read only up to `max_line_bytes` (a file of one huge line
    is refused with DataError, not read whole into memory)."""
    lineno = 0
    while line := f.readline(max_line_bytes + 1):
        lineno += 1
        if len(line) > max_line_bytes:
            raise DataError(f"{path}:{lineno}: a line longer than {max_line_bytes:,} bytes; one record per line is "
                            "expected (is it the right file, or one document too large? split it into several "
                            "records)")
        yield lineno, line


def open_new(path: str | Path, mode: str = "wb") -> IO:
    """A file that must not exist yet (in a folder we just created), never through a link."""
    return os.fdopen(open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL), mode)


def remove_tree(path: str | Path) -> None:
    """Remove a folder tree we own; a link in its place is unlinked, its target never touched."""
    if os.path.islink(path):
        os.unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """Yield a file object; on clean exit it replaces `path` atomically, on error it vanishes. The temp file is
    created O_EXCL|O_NOFOLLOW (mkstemp) and renamed over `path`: a link at `path` is replaced, not followed."""
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


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def remove_stale_temps(folder: Path) -> int:
    """Delete temp files a killed run left in `folder` (call while holding its DirLock)."""
    n = 0
    for tmp in folder.rglob(f".*{TEMP_SUFFIX}"):  # rglob does not descend into linked folders
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # a link is removed itself
            n += 1
    return n


class DirLock:
    """Exclusive advisory lock on `folder/.lock`, so two runs never write the same outputs.

    The kernel drops the lock when the process dies, so a killed run never blocks the next one. The `.lock` is
    opened without following a link (LinkError names a planted one): our pid line never lands in another file.
    """

    def __init__(self, folder: str | Path, what: str):
        self.path = Path(folder) / ".lock"
        self.what = what
        self._fd: int | None = None

    def __enter__(self) -> DirLock:
        with user_paths():  # the locked folder is an output folder the user named (data.root, train.out_dir)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = open_fd(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 4096, 0).decode(errors="replace").strip() or "unknown process"
            os.close(self._fd)
            self._fd = None
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
