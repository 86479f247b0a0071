"""Run directories: `<out_dir>/<size>_<pe>_<budget>_s<seed>[_vN]/`.

A directory belongs to one *identity* (model, PE, data fingerprint, seed), stored in identity.json.
Starting a run whose directory holds another identity moves on to `_v2`, `_v3`, ...; resuming finds
the directory of the same identity.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from posbench.config_loader import ConfigError
from posbench.data.atomic import write_text

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def format_tokens(n: float) -> str:
    """2.35B, 590M, 12K: the budget as it appears in run names, 3 significant digits of the exact token
    count (tiny: 40 x 58,727,680 params = 2.349e9 -> 2.35B; the reference framework rounds params to 59M
    first and prints 2.4B)."""
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{int(n)}"


def check_run_name(name: str) -> str:
    if not _SAFE.match(name) or ".." in name:
        raise ConfigError(f"unsafe run name `{name}`: use letters, digits, '.', '_', '+', '-' only, no path "
                          "separators, no '..', not absolute")
    return name


def default_name(size: str, pe: str, budget_tokens: int, seed: int) -> str:
    return f"{size}_{pe}_{format_tokens(budget_tokens)}_s{seed}"


def _atomic_json(path: Path, data: dict) -> None:
    write_text(path, json.dumps(data, indent=1, sort_keys=True))


def find_run_dir(out_dir: Path, name: str, identity: dict) -> tuple[Path, bool]:
    """(directory, exists_already) for this identity: the first of name, name_v2, ... that is free
    or holds the same identity."""
    check_run_name(name)
    version = 1
    while True:
        candidate = out_dir / (name if version == 1 else f"{name}_v{version}")
        ident_file = candidate / "identity.json"
        if not candidate.exists():
            return candidate, False
        if ident_file.is_file() and read_identity(ident_file) == identity:
            return candidate, True
        version += 1


def read_identity(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(f"{path} is empty or not JSON, so this run directory's identity is unknown; restore "
                          "it, or delete the directory if its checkpoints are not needed") from None


def claim_run_dir(run_dir: Path, identity: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    _atomic_json(run_dir / "identity.json", identity)
