"""Learned PE parameters in the metrics rows (training/pe_params.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posbench.evaluation.loading import load_model

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--model-size", "nano", "model.seq_len=32", "train.stream=random", "train.budget_unit=tokens",
        "train.target_budgets=[384]", "train.global_batch_tokens=128", "train.micro_batch=2", "train.eval_interval=0",
        "train.ckpt_interval=0", "train.log_interval=1", "logging.wandb=disabled", "schedule.warmup_tokens=64",
        "train.device=cpu", "optim.lr=0.05"]


def test_kerple_parameters_are_logged_every_row_and_end_at_the_checkpoint(tmp_path):
    """Item 5: a PE with learned parameters (KERPLE's r1, r2 per layer and head) logs each of them in
    every metrics row; they move over training, and the last row holds the values the final checkpoint saved."""
    got = subprocess.run([sys.executable, str(ROOT / "train.py"), *ARGS, "pe.name=kerple_log",
                          f"train.out_dir={tmp_path}", "train.run_name=k"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert got.returncode == 0, got.stderr
    rows = [json.loads(line) for line in (tmp_path / "k" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "loss" in r]
    model = load_model(tmp_path / "k").model
    saved = {n: p for n, p in model.named_parameters() if n.startswith("pe.")}
    assert set(saved) == {"pe.r1_LH", "pe.r2_LH"}
    for name, p in saved.items():
        for i, value in enumerate(p.detach().reshape(-1).tolist()):
            assert rows[-1][f"pe/{name}/{i}"] == pytest.approx(value, rel=1e-6, abs=1e-7)
    assert rows[0]["pe/pe.r1_LH/0"] != rows[-1]["pe/pe.r1_LH/0"]


def test_a_pe_without_parameters_logs_none(tmp_path):
    """Item 5: RoPE has no learned parameters: no `pe/` key."""
    from posbench.config import load_config
    from posbench.model.build import build_model
    from posbench.training.pe_params import pe_parameter_values

    cfg = load_config(overrides=["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.d_ff=64",
                                 "model.seq_len=32", "model.vocab_size=64", "pe.name=rope"])
    assert pe_parameter_values(build_model(cfg.model, cfg.pe, "cpu")) == {}
    table = load_config(overrides=["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.d_ff=64",
                                   "model.seq_len=32", "model.vocab_size=64", "pe.name=learned"])
    model = build_model(table.model, table.pe, "cpu")
    weight = model.pe.table.weight.detach()
    assert float(pe_parameter_values(model)["pe/pe.table.weight/rms"]) == pytest.approx(
        float(weight.pow(2).mean().sqrt()))
