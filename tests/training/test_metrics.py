"""The health metrics the loop logs, each against a manual computation on the same tensors."""

import json
import math
from pathlib import Path

import torch

from posbench.config import load_config
from posbench.model.build import build_model
from posbench.model.output import ModelOutput
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from posbench.training.metrics import grad_norms_by_layer, output_entropy, weight_norm
from tests.training.helpers import nano_config

SOURCE = RandomTokens(512, 64)


def rows(run_dir) -> list[dict]:
    return [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def _model_after_backward():
    cfg = load_config(model_size="nano", overrides=["model.n_layers=3"])
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.pe, "cpu")
    x = torch.randint(0, 512, (2, 32))
    loss = model(x, x.roll(-1, 1)).loss
    loss.backward()
    return model


def test_layer_grad_norms_equal_a_manual_computation():
    model = _model_after_backward()
    got = grad_norms_by_layer(model)
    for i, block in enumerate(model.blocks):
        manual = math.sqrt(sum(p.grad.double().pow(2).sum().item() for p in block.parameters()))
        assert math.isclose(got[f"grad_norm/layer{i}"], manual, rel_tol=1e-5)
    assert math.isclose(got["grad_norm/embedding"], model.tok_emb.weight.grad.norm().item(), rel_tol=1e-5)
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item()
    assert math.isclose(math.sqrt(sum(v * v for v in got.values())), total, rel_tol=1e-5)


def test_weight_norm_and_output_entropy_by_hand():
    model = _model_after_backward()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])  # tied head counted once
    assert math.isclose(weight_norm(model), flat.norm().item(), rel_tol=1e-5)
    logits = torch.randn(3, 5, 7)
    p = logits[0].softmax(-1)
    manual = -(p * p.log()).sum(-1).mean().item()
    assert math.isclose(output_entropy(ModelOutput(logits=logits)), manual, rel_tol=1e-5)
    assert math.isclose(output_entropy(ModelOutput(logits=torch.zeros(1, 4, 7))), math.log(7), rel_tol=1e-6)


def test_loop_logs_layer_norms_that_add_up_to_the_clipped_total(tmp_path):
    out = train(nano_config(tmp_path, "train.max_steps=4"), SOURCE)
    logged = [r for r in rows(out["run_dir"]) if "loss" in r]
    assert len(logged) == 4
    for r in logged:
        layers = [r[f"grad_norm/layer{i}"] for i in range(2)]
        assert all(v > 0 for v in layers)
        parts = [v for k, v in r.items() if k.startswith("grad_norm/")]
        assert math.isclose(math.sqrt(sum(v * v for v in parts)), r["grad_norm"], rel_tol=1e-4)
        assert math.isclose(r["ppl"], math.exp(r["loss"]), rel_tol=1e-9)
        assert r["weight_norm"] > 0 and 0 < r["output_entropy"] <= math.log(512) + 1e-4
        assert "memory/peak_gib" not in r  # CPU: torch tracks no peak


def test_best_link_follows_the_lowest_validation_loss_and_survives_pruning(tmp_path):
    out = train(nano_config(tmp_path, "train.eval_interval=2", "train.ckpt_interval=2", "train.keep_last=2",
                            "train.eval_batches=2"), SOURCE)
    run_dir = Path(out["run_dir"])
    vals = {r["step"]: r["val/loss"] for r in rows(run_dir) if "val/loss" in r}
    assert all(r["val_loss"] == r["val/loss"] for r in rows(run_dir) if "val/loss" in r)
    best_step = min(vals, key=lambda s: (vals[s], s))
    best = run_dir / "best"
    assert best.is_symlink() and best.resolve().name == f"step_{best_step:08d}"
    meta = json.loads((best / "meta.json").read_text())
    assert meta["best_val_loss"] == vals[best_step]
    assert meta["kind"] != "periodic"  # not saved a second time as periodic at the same step (branch, final may)
    assert meta["provenance"]["packages"]["torch"] == torch.__version__
    assert len(meta["provenance"]["git"].get("commit", "0" * 40)) == 40
