"""The one rule for paths that come from a server or a file (a hub listing, a manifest, a checkpoint's
meta.json): they are used only if they stay inside the folder they are meant for, and in one spelling: `.`
components are dropped (`sample/./my_a.txt` is `sample/my_a.txt`), so two spellings of one file can never
become two files (two splits, one `.part` written by two workers)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from posbench.errors import DataError


def safe_relpath(name: object, where: str, error: type[Exception] = DataError) -> str:
    """`name` in its normal form (`.` components dropped) if it is a plain relative path that stays inside its
    folder when joined, else `error` (`..`, empty components, absolute, drive-like, backslashes, NUL)."""
    if not isinstance(name, str) or not name or "\x00" in name or "\\" in name:
        raise error(f"{where}: refusing path {name!r} (not a plain relative path)")
    path = PurePosixPath(name)
    if not path.parts:
        raise error(f"{where}: refusing path {name!r}: it names the folder itself, not a file")
    if path.is_absolute() or any(part in ("..", "") for part in name.split("/")) or ":" in path.parts[0]:
        raise error(f"{where}: refusing path {name!r}: it would resolve outside the target folder")
    parts = [part for part in name.split("/") if part != "."]
    if not parts:
        raise error(f"{where}: refusing path {name!r}: it names the folder itself, not a file")
    return "/".join(parts)


def is_inside(path: str | Path, root: str | Path) -> bool:
    """Whether `path` resolves (symlinks followed) to `root` or somewhere below it."""
    return Path(path).resolve().is_relative_to(Path(root).resolve())
