"""A study's cells on disk, under `<out>`: the result file of each finished cell (`cells/<cell_id>.json`), the
settings it is made with (`cell_spec`, `specs/<cell_id>.json`, written before the cell trains), its CPU seconds
beside its log (`logs/<cell_id>.cpu.json`), and the checks a re-run makes before reusing any of them: a damaged
or foreign result is moved aside (`<cell>.json.damaged`) and the cell trains again; a finished cell made with other
settings than this study's cell of that name is refused before any work (studies/study_runner.py runs the rest).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tqdm import tqdm

from posbench.config_loader import to_dict
from posbench.errors import ConfigError
from posbench.grid.arm import migrate_spec, spec_form
from posbench.settings_migration import upgrade
from posbench.studies.cell_result import cell_problem, loads_cell
from posbench.studies.study_spec import Cell


def cell_path(out_dir: Path, cell: Cell) -> Path:
    return out_dir / "cells" / f"{cell.cell_id}.json"


def spec_path(out_dir: Path, cell: Cell) -> Path:
    return out_dir / "specs" / f"{cell.cell_id}.json"


def cell_spec(cell: Cell) -> str:
    """What decides a cell's result, as canonical JSON: its task, PE, seed, axes and arm, and the study settings it
    trains and is scored with. Not the grid's lists (other PEs, tasks, seeds), the workers, the name, or what only
    the report reads (confidence, n_boot, success_threshold, references, claims)."""
    s = cell.study
    arm = spec_form(cell.arm)  # an arm without task options or run settings keeps the spec it had before those
    spec = {"task": to_dict(cell.task), "pe": to_dict(cell.pe), "seed": cell.seed, "axes": cell.axes,
            "arm": arm, "overrides": list(s.overrides),
            "train": to_dict(s.train), "eval": {"n_examples": s.eval.n_examples, "seed": s.eval.seed}}
    grid = s.eval.length_grid
    if grid.active:  # what the grid scores (its `keep` is the report's); studies without one keep their old specs
        spec["eval"]["length_grid"] = {"multiples": grid.multiples, "depths": grid.depths, "per_cell": grid.per_cell}
    return json.dumps(spec, sort_keys=True, default=str)


def damage(out_dir: Path, cell: Cell) -> str | None:
    """Why the cell's result file is not this cell's finished result (studies/cell_result.py), None when it is one
    or when there is no file."""
    path = cell_path(out_dir, cell)
    return cell_problem(path.read_text(errors="replace"), cell.cell_id) if path.is_file() else None


def finished(out_dir: Path, cell: Cell) -> bool:
    """A cell whose result file exists and reads as its result. A damaged or foreign one is said and moved aside,
    to `<cell_id>.json.damaged` (kept: nothing written is lost), and the cell runs again."""
    path = cell_path(out_dir, cell)
    problem = damage(out_dir, cell)
    if problem is not None:
        kept, n = path.with_name(path.name + ".damaged"), 1
        while os.path.lexists(kept):  # an earlier damaged copy is kept too
            kept, n = path.with_name(f"{path.name}.damaged.{n}"), n + 1
        os.replace(path, kept)
        tqdm.write(f"{path}: {problem}; moved to {kept}, running the cell again")
    return path.is_file()


def report_only_refusal(out_dir: Path, cells: list[Cell]) -> str | None:
    """Why `--report-only` cannot report these cells from `out_dir` (unfinished, damaged or foreign cells named),
    None when every one is finished; it reads and changes nothing else."""
    damaged = [f"{c.cell_id} ({problem})" for c in cells if (problem := damage(out_dir, c)) is not None]
    missing = [c.cell_id for c in cells if not cell_path(out_dir, c).is_file()]
    if damaged:
        return (f"--report-only: {len(damaged)} of {len(cells)} cell files in {out_dir / 'cells'} are not their "
                f"cells' results: {'; '.join(damaged[:3])}; nothing was changed. Move them aside, or run without "
                "--report-only (which keeps each as <cell>.json.damaged and trains the cell again)")
    if missing:
        return (f"--report-only: {len(missing)} of {len(cells)} cells are not finished in {out_dir} (first: "
                f"{', '.join(missing[:4])}); run without --report-only to train them, or narrow the grid (--seeds) "
                "to the finished ones")
    return None


def recorded_spec(out_dir: Path, cell: Cell) -> dict | None:
    """The settings a finished cell was made with: its spec file, else the spec the cell's result carries (cells
    keep their own since specs/ can be lost); None for a cell from before either was kept, or a damaged one."""
    path, result = spec_path(out_dir, cell), cell_path(out_dir, cell)
    if not result.is_file():
        return None
    if path.is_file():
        return json.loads(path.read_text())
    if damage(out_dir, cell) is not None:
        return None
    return loads_cell(result.read_text(), str(result), cell.cell_id).spec


def check_finished_cells(out_dir: Path, cells: list[Cell]) -> None:
    """ConfigError when a finished cell in `out_dir` was made with other settings than this study's cell of the
    same name. A cell from before specs were kept (no spec file, none in the result) is reused as it always was."""
    stale = []
    for cell in cells:
        old, new = recorded_spec(out_dir, cell), json.loads(cell_spec(cell))
        if old is None:
            continue
        upgrade(old)  # a spec recorded before a setting was renamed names it as it is now
        migrate_spec(old)  # and one recorded while an arm's settings were dotted text holds them as `run` now
        if old != new:
            stale.append(f"{cell.cell_id} ({', '.join(k for k in sorted(new) if old.get(k) != new[k])})")
    if stale:
        more = f" and {len(stale) - 3} more" if len(stale) > 3 else ""
        raise ConfigError(f"{out_dir} holds finished cells made with other settings than this study's: "
                          f"{'; '.join(stale[:3])}{more} differ. Give another --out, or delete {out_dir / 'cells'} "
                          "to run them again")


def cpu_path(out_dir: Path, cell: Cell) -> Path:
    """A cell's CPU seconds per phase (`cell.CpuPhases`), beside its log: read by scripts/bench_study.py."""
    return out_dir / "logs" / f"{cell.cell_id}.cpu.json"
