"""A study cell's RunConfig: the cell's own values as one typed mapping, then the study's settings (its
dotted text and vary axes), the row's PE and architecture set whole, resolved once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from posbench.config import RunConfig
from posbench.config_loader import load
from posbench.data.tasks.mix import TaskMixConfig
from posbench.model.matmul import AUTO
from posbench.studies.study_spec import Cell


def cell_config(cell: Cell, task, work_dir: Path, matmul: str | None = None):
    """`matmul`: the library the study measured for model.matmul=auto (studies/study_matmul.py), which the cell
    uses instead of measuring again; None: the setting as it is."""
    st = cell.study.train
    seq = max(task.max_tokens("train"), task.max_tokens("id"))
    tokens_per_step = st.batch_size * seq
    budget = st.steps * tokens_per_step
    interval = max(1, st.steps // st.curve_points)
    # the cell's own values, as the typed values they are; the study's dotted text and vary axes
    # (cell.settings) come after them and win
    cell_values = {
        "model": {"size": "study", "vocab_size": task.vocab.size, "seq_len": seq},
        "seed": cell.seed,
        "train": {"out_dir": str(work_dir), "run_name": cell.cell_id, "budget_unit": "tokens",
                  "target_budgets": [budget], "global_batch_tokens": tokens_per_step, "micro_batch": st.batch_size,
                  "log_interval": interval, "eval_interval": 0, "ckpt_interval": interval,
                  "keep_last": st.curve_points + 2, "device": "cpu",
                  "threads": 1},  # cells run side by side in processes: one thread each (procpool.py)
        "logging": {"wandb": "disabled"},
        "optim": {"lr": st.lr},
        "schedule": {"warmup_tokens": max(1, int(st.warmup_frac * budget)), "decay_frac": st.decay_frac},
    }
    cfg = load(RunConfig, overrides=[cell_values, *cell.settings])
    # The row's PE and architecture are typed objects already: set whole (a study override cannot leak
    # options into them), once. A table-based PE (learned, integer, ...) must cover the OOD lengths for
    # OOD to be measurable at all: its rows past the training length stay untrained, which is exactly
    # what the study probes.
    ood = task.max_tokens("ood")
    unbounded = getattr(cell.pe, "max_positions", 0) is None
    cfg.pe = dataclasses.replace(cell.pe, max_positions=ood) if unbounded else dataclasses.replace(cell.pe)
    cfg.model.arch = cell.arch.for_task(task.source_end_token, ood)
    # What trained it: the task's own rows, not the default pretraining mix and tokenizer, so every reader of the
    # saved config.yaml (eval, the app's Try page, export) treats the cell as the task model it is
    cfg.train.stream = "task"
    cfg.data = dataclasses.replace(cfg.data, task=cell.task, mix=TaskMixConfig())
    # a study asked for WandB (overrides: [logging.wandb=online]) logs one run per cell, grouped by the study
    if not cfg.logging.group:
        cfg.logging = dataclasses.replace(cfg.logging, group=cell.study.name)
    if matmul is not None and cfg.model.matmul == AUTO:
        cfg.model.matmul = matmul
    return cfg.resolve()
