"""The one rule for paths that come from a server or a file (a hub listing, a manifest, a checkpoint's
meta.json): they are used only if they stay inside the folder they are meant for."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from posbench.data.errors import DataError


def safe_relpath(name: object, where: str, error: type[Exception] = DataError) -> str:
    """`name` if it is a plain relative path that stays inside its folder when joined, else `error`."""
    if not isinstance(name, str) or not name or "\x00" in name or "\\" in name:
        raise error(f"{where}: refusing path {name!r} (not a plain relative path)")
    path = PurePosixPath(name)
    if path.is_absolute() or any(part in ("..", "") for part in name.split("/")) or ":" in path.parts[0]:
        raise error(f"{where}: refusing path {name!r}: it would resolve outside the target folder")
    return name


def is_inside(path: str | Path, root: str | Path) -> bool:
    """Whether `path` resolves (symlinks followed) to `root` or somewhere below it."""
    return Path(path).resolve().is_relative_to(Path(root).resolve())
