"""Shared settings for training tests: a nano model on random tokens, a few dozen steps."""

import json
from pathlib import Path

from posbench.config import load_config

BASE = ["train.budget_unit=tokens", "train.target_budgets=[8192,16384]", "train.global_batch_tokens=512",
        "train.micro_batch=2", "train.log_interval=1", "train.eval_interval=0", "train.ckpt_interval=8",
        "logging.wandb=disabled", "schedule.warmup_tokens=1024", "model.seq_len=64", "model.dropout=0.1",
        "optim.lr=3e-3"]


def nano_config(out_dir, *extra):
    return load_config(model_size="nano", overrides=BASE + [f"train.out_dir={out_dir}", *extra])


def losses(run_dir) -> dict[int, float]:
    rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def lrs(run_dir) -> dict[int, float]:
    rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["lr"] for r in rows if "lr" in r}
