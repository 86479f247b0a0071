"""Where the export's files go. A staging directory beside the target (same filesystem) is renamed into place only
after the check passed, so the target is either absent, the user's old directory untouched, or the whole new export.
A non-empty target is refused (exit 2) unless `overwrite`, which replaces it whole: the old directory is moved
aside, the new one renamed in, then the old one removed. A link at the target is refused (fileio's module doc).
Files get the modes a plain `cp` gives (0666/0777 less the umask), not the 0600/0700 of temp files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from posbench.errors import BadInputError
from posbench.fileio import fsync_dir, link_error, remove_tree


def check_target(out: Path, overwrite: bool) -> None:
    """Refuse (exit 2) a target that is a link, or that holds anything and `overwrite` is not given."""
    if out.is_symlink():
        raise link_error(out)
    if not os.path.lexists(out) or overwrite:
        return
    if not out.is_dir():
        raise BadInputError(f"{out} exists and is not a directory; pass --overwrite to replace it with the export, "
                            "or choose another output directory")
    entries = sorted(p.name for p in out.iterdir())
    if entries:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise BadInputError(f"{out} is not empty ({len(entries)} entries: {shown}); pass --overwrite to replace it "
                            "whole, or choose an empty or new directory")


def make_shareable(folder: Path) -> None:
    """The modes `cp` would give (0666/0777 less the umask): mkdtemp makes 0700 directories, and safetensors and
    tempfile write 0600 files."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(folder, 0o777 & ~mask)
    for path in folder.rglob("*"):
        if not path.is_symlink():
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def place(staging: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished `staging` directory to `out`: the old `out` (only with `overwrite`) is moved aside
    first and removed once the new one is in place; an empty `out` is simply replaced."""
    check_target(out, overwrite)  # again: the target may have been filled while the export was checked
    aside = None
    if os.path.lexists(out):
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        else:
            aside = out.parent / f".{out.name}.old-{os.getpid()}"
            remove_tree(aside)
            os.replace(out, aside)
    try:
        os.replace(staging, out)
    except BaseException:
        if aside is not None:
            os.replace(aside, out)
        raise
    fsync_dir(out.parent)
    if aside is not None:
        if aside.is_dir() and not aside.is_symlink():
            shutil.rmtree(aside)
        else:
            aside.unlink()
