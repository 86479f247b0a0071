"""DroPE (Gelberg et al. 2025, arXiv 2512.12167): RoPE until pe.drop_at, then NoPE on the same weights.
The degenerate equalities, the drop as a schedule step of the training loop, exact resume across it, and the
checkpoint rebuilding the model as trained."""

import json
from pathlib import Path

import pytest
import torch

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.evaluation.loading import load_model
from posbench.training import checkpoint as ckpt
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from posbench.training.schedule import drop_pe_tokens
from tests.conftest import build_test_model
from tests.training.helpers import losses, nano_config

SOURCE = RandomTokens(512, 64)
IDX = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(0))


def test_before_the_drop_it_is_rope_same_init_same_logits():
    drope, rope = build_test_model("drope").eval(), build_test_model("rope").eval()
    a, b = drope.state_dict(), rope.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with torch.no_grad():
        assert torch.equal(drope(IDX).logits, rope(IDX).logits)


def test_after_the_drop_it_is_nope_on_the_same_weights():
    drope, none = build_test_model("drope").eval(), build_test_model("none").eval()
    none.load_state_dict(drope.state_dict())
    with torch.no_grad():
        before = drope(IDX).logits
        cfg = drope.pe.drop()
        after = drope(IDX).logits
        assert cfg.dropped and drope.pe.cfg is cfg
        assert torch.equal(after, none(IDX).logits)
        assert (after - before).abs().max() > 1e-3
        rebuilt = build_test_model("drope", overrides=["pe.dropped=true"]).eval()  # what a checkpoint's config says
        rebuilt.load_state_dict(drope.state_dict())
        assert torch.equal(rebuilt(IDX).logits, after)


def test_the_drop_point_is_a_share_of_the_budget():
    cfg = load_config(model_size="nano", overrides=["pe.name=drope", "pe.drop_at=0.875"])
    assert drop_pe_tokens(cfg.pe.drop_share(), 16_000) == 14_000
    own = load_config(model_size="nano", overrides=["pe.name=drope"])  # a row `{name: drope}`: the PE's own 0.8
    assert drop_pe_tokens(own.pe.drop_share(), 16_000) == 12_800
    rope = load_config(model_size="nano")
    assert drop_pe_tokens(rope.pe.drop_share(), 16_000) is None


@pytest.mark.parametrize("override,message", [
    (["pe.name=rope", "pe.drop_at=0.5"], "unknown config key `pe.drop_at`"),  # RoPE has no drop point
    (["pe.name=drope", "pe.drop_at=1.0"], r"in \(0, 1\)"),
    # the schedule's knob is gone: the error names the one that replaced it
    (["pe.name=drope", "schedule.drop_pe_at=0.5"], r"`schedule.drop_pe_at` is no longer a setting: .*pe.drop_at"),
])
def test_a_drop_that_cannot_happen_is_refused_before_work(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(model_size="nano", overrides=override)


def drope_run(tmp_path, *extra):
    # budget 16384 tokens = 32 steps of 512; the PE goes at 8192 tokens, before step 17
    return train(nano_config(tmp_path, "pe.name=drope", "pe.drop_at=0.5", *extra), SOURCE)


def test_training_drops_the_pe_at_its_point_and_resume_across_it_is_exact(tmp_path):
    full = drope_run(tmp_path, "train.run_name=full", "train.keep_last=10")
    part = drope_run(tmp_path, "train.run_name=part", "train.max_steps=11")  # stops before the drop
    drope_run(tmp_path, "train.run_name=part", "train.resume=auto", "train.max_steps=9")  # stops after it (step 20)
    rest = drope_run(tmp_path, "train.run_name=part", "train.resume=auto")  # resumes a dropped checkpoint
    assert rest["step"] == full["step"] == 32
    a, b = losses(full["run_dir"]), losses(part["run_dir"])
    assert sorted(a) == sorted(b) == list(range(1, 33))
    assert all(a[s] == b[s] for s in a), "per-step losses must be bit-identical across the drop and resume"
    # and the drop changed training: a RoPE run diverges from it after the point, not before
    rope = losses(train(nano_config(tmp_path, "train.run_name=rope", "pe.name=rope"), SOURCE)["run_dir"])
    assert all(rope[s] == a[s] for s in range(1, 17)) and any(rope[s] != a[s] for s in range(17, 33))
    # the checkpoints say which model their weights are: RoPE at step 8 and 16, NoPE (dropped) after
    run = Path(full["run_dir"])
    for step, dropped in ((8, False), (16, False), (24, True), (32, True)):
        step_dir = ckpt.step_dir(run, step)
        meta = json.loads((step_dir / "meta.json").read_text())
        assert ("pe_dropped_at_tokens" in meta) == dropped and meta.get("pe_dropped_at_tokens", 8192) == 8192
        assert load_model(step_dir).model.pe.cfg.dropped is dropped  # eval.py's loader


def test_a_dropped_checkpoint_does_not_continue_under_a_schedule_that_would_rotate_it_again(tmp_path):
    done = drope_run(tmp_path, "train.run_name=d", "train.max_steps=20")  # past the drop at step 16
    latest = Path(done["run_dir"]) / "latest"
    with pytest.raises(ConfigError, match="its PE switched at 8,192 tokens.*only at 13,107 tokens"):
        train(nano_config(tmp_path, "train.run_name=b", "pe.name=drope", f"train.branch_from={latest}",
                          "train.budget=16384"), SOURCE)
    with pytest.raises(ConfigError, match="only at 14,336 tokens"):
        train(nano_config(tmp_path, "train.run_name=c", "pe.name=drope", "pe.drop_at=0.875",
                          f"train.branch_from={latest}", "train.budget=16384"), SOURCE)
