"""A study's linear-layer library under `model.matmul=auto`: measured once (model/matmul_choice.py) at its first
cell's model and step, on the cells' thread count, and kept in `<out>/matmul.json`. Every cell of the study, and
every later run into the same `--out`, reads that file instead of measuring again, so all its cells, those re-run
after an interrupt included, round alike. Each cell's result also names the library that ran (`matmul`)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from posbench.data.tasks.task import build_task
from posbench.fileio import write_text
from posbench.model.build import build_model
from posbench.model.matmul import AUTO, MATMULS
from posbench.model.matmul_choice import resolve_matmul
from posbench.studies.cell_config import cell_config
from posbench.studies.study_spec import Cell

MATMUL_FILE = "matmul.json"


def recorded_matmul(out_dir: Path) -> str | None:
    """The library `<out>/matmul.json` records, None when there is none (or it names no library)."""
    path = Path(out_dir) / MATMUL_FILE
    if not path.is_file():
        return None
    try:
        chosen = json.loads(path.read_text()).get("matmul")
    except (ValueError, AttributeError):  # a damaged record is measured again and rewritten
        return None
    return chosen if chosen in MATMULS else None


def study_matmul(cells: list[Cell], out_dir: Path) -> tuple[str | None, str]:
    """(library, note) for the study's cells: None when its model.matmul is not `auto` or its cells train off the
    CPU (each cell uses the setting as it is); the recorded library when `<out>/matmul.json` has one; else measured
    now and recorded."""
    first = cells[0]
    cfg = cell_config(first, build_task(first.task), Path(out_dir) / "work")
    if cfg.model.matmul != AUTO or cfg.train.device != "cpu":  # off the CPU auto is torch's path, unmeasured
        return None, ""
    recorded = recorded_matmul(out_dir)
    if recorded is not None:
        return recorded, f"matmul: {recorded} (model.matmul=auto, as {Path(out_dir) / MATMUL_FILE} records)"
    model = build_model(cfg.model, cfg.pe, "cpu", 0, matmul="torch")
    threads = cfg.train.threads if cfg.train.threads != "auto" else 1  # cell_config sets the cells' count
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)  # measured on the thread count the cells train with
    try:
        chosen, note = resolve_matmul(AUTO, model, cfg.train.micro_batch * cfg.model.seq_len)
    finally:
        torch.set_num_threads(saved)
    write_text(Path(out_dir) / MATMUL_FILE, json.dumps({"matmul": chosen, "note": note, "cell": first.cell_id},
                                                       sort_keys=True))
    return chosen, note
