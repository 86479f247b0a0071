"""What code made a checkpoint: the git commit of the posbench source (when it runs from a checkout) and
the installed distributions with their versions, so a result can be traced to the exact software.
Computed once per process; recorded in every checkpoint's meta.json under `provenance`."""

from __future__ import annotations

import functools
import subprocess
import sys
from importlib import metadata
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parents[1]


def git_commit(where: Path = SOURCE_DIR) -> dict:
    """{"commit": sha, "dirty": bool} of the checkout holding `where`; {} for an installed wheel."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {}


def package_versions() -> dict[str, str]:
    """Every installed distribution (name lower-cased) -> version."""
    out = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            out[name.lower()] = dist.version
    return dict(sorted(out.items()))


@functools.cache
def provenance() -> dict:
    return {"git": git_commit(), "python": sys.version.split()[0], "packages": package_versions()}
