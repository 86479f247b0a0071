"""gpu_check's command line checked before any work: each mode's names against what exists (one line, exit 2,
the valid names), and `--out` a folder that can be made. A GPU call costs minutes of a lent machine: a mistyped
name must not run zero rows silently, or fail after the matmul probe and a compile."""

from __future__ import annotations

import os
from pathlib import Path

from posbench.config_loader import nearest
from posbench.errors import ConfigError, UserPathError


def check_names(flag: str, given, valid) -> None:
    """Every name in `given` is one of `valid`, else ConfigError naming the first unknown and the valid names."""
    valid = list(valid)
    unknown = [name for name in given or () if name not in valid]
    if unknown:
        raise ConfigError(f"{flag}: unknown `{unknown[0]}`{nearest(unknown[0], valid)}; valid: {', '.join(valid)}")


def check_out(out: Path | None) -> None:
    """`--out` (or $OUT): a folder, or a path whose nearest existing ancestor is a writable folder (the JSON is
    written after each row, so a file there would fail at the first row, after the probes)."""
    if out is None:
        return
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserPathError(f"--out {out}: {existing} is a file, not a folder; give a folder (made if missing)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserPathError(f"--out {out}: {existing} is not writable; give a folder you can write")


def check_studies(args) -> None:
    """`studies`: the study and sweep load strictly (a preset name or a YAML file; an unknown one names the nearest
    preset), the seed lists are integers >= 0, at least one worker: before any job starts."""
    from posbench.studies.study_spec import load_study
    from posbench.sweeps.sweep_spec import load_sweep

    load_study(args.study)
    if args.sweep:
        load_sweep(args.sweep)
    for seeds in args.study_seeds:
        parts = seeds.split(",")
        if not all(p.strip().isdigit() for p in parts):
            raise ConfigError(f"--study-seeds {seeds}: give comma-separated integers >= 0 (e.g. 0,1,2)")
    if args.study_workers < 1:
        raise ConfigError(f"--study-workers {args.study_workers}: give at least 1")
