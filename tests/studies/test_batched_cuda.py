"""Batched groups on CUDA (skipped without it): the step replayed from a CUDA graph against the same step run
eagerly, members against their lone CUDA runs (dropout 0: on CUDA a member's masks are its own stream, not the
fused kernel's), and `posbench study --device cuda` batching by default."""

import json
from pathlib import Path

import pytest
import torch

from posbench.cli.study import main as study_main
from posbench.studies import batched_step
from posbench.studies.batched_train import BatchedGroup, train_group
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from tests.studies.test_batched_rows import run_cfg
from tests.studies.test_study import mini

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
V, T = 11, 16
CUDA_RTOL = 1e-3  # fp32 on CUDA: the lone run's SDPA against the group's eager kernel, TF32 matmuls either way


def cuda_cfg(seed, out, dropout=0.0):
    cfg = run_cfg({"name": "rope"}, seed, out)
    cfg.train.device, cfg.train.precision, cfg.model.dropout = "cuda", "fp32", dropout
    return cfg


def test_the_graphed_step_is_the_eager_step(tmp_path, monkeypatch):
    seeds = [0, 1, 2]
    got = {}
    for kind in ("cuda", "eager"):
        if kind == "eager":
            monkeypatch.setitem(batched_step.STEP_KINDS, "cuda", batched_step.EagerStep)
        cfgs = [cuda_cfg(s, tmp_path / kind, dropout=0.1) for s in seeds]
        got[kind] = train_group(cfgs, [RandomTokens(V, T, s) for s in seeds], lambda m, step, model: None)
    for graphed, eager in zip(got["cuda"], got["eager"]):
        assert [r["loss"] for r in graphed] == pytest.approx([r["loss"] for r in eager], rel=1e-5)


def test_the_graph_is_captured_on_cuda(tmp_path):
    group = BatchedGroup([cuda_cfg(s, tmp_path) for s in (0, 1)], [RandomTokens(V, T, s) for s in (0, 1)])
    group.probe()
    assert isinstance(batched_step.make_step(group, 1, 1.0), batched_step.GraphedStep)


def test_members_on_cuda_are_their_lone_cuda_runs(tmp_path):
    seeds = [0, 1]
    rows = train_group([cuda_cfg(s, tmp_path / "b") for s in seeds], [RandomTokens(V, T, s) for s in seeds],
                       lambda m, step, model: None)
    for m, s in enumerate(seeds):
        result = train(cuda_cfg(s, tmp_path / "lone"), RandomTokens(V, T, s))
        want = [json.loads(line) for line in (Path(result["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
        assert [r["loss"] for r in rows[m]] == pytest.approx([r["loss"] for r in want if "loss" in r], rel=CUDA_RTOL)


def test_a_cuda_study_batches_its_seeds_by_default(tmp_path):
    out = tmp_path / "out"
    assert study_main([str(mini(tmp_path)), "--device", "cuda", "--seeds", "0", "1", "--out", str(out),
                       "--no-progress"]) == 0
    logs = "".join(p.read_text() for p in (out / "logs").glob("*.log"))
    assert "as one batched model" in logs and "captured in a CUDA graph" in logs
    out = tmp_path / "alone"
    assert study_main([str(mini(tmp_path)), "--device", "cuda", "--seeds", "0", "1", "--out", str(out),
                       "--no-progress", "--no-batch-seeds"]) == 0
    assert "as one batched model" not in "".join(p.read_text() for p in (out / "logs").glob("*.log"))
