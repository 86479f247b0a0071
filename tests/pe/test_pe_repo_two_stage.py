"""RePo as its authors train it, a second stage after RoPE (`pe.rope_until`, their continual pretraining from a RoPE
checkpoint): before the switch the model is RoPE on every layer, after it RePo on the same weights; the position
networks get no gradient and no decay before it (bit-equal to their init at the switch); resume across the switch
is exact; the checkpoints rebuild the model as trained; a bad share is refused with one line."""

import json
from pathlib import Path

import pytest
import torch

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.evaluation.loading import load_model
from posbench.model.build import build_model
from posbench.training import checkpoint as ckpt
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from posbench.training.rundir import identity, run_name
from tests.conftest import build_test_model
from tests.training.helpers import losses, nano_config

SOURCE = RandomTokens(512, 64)
IDX = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(0))
NETWORKS = ("gate_RMD", "content_RMD", "final_RHM")


def _shared(src, dst):
    """`dst` with `src`'s weights for every tensor both have (a RoPE model has no position networks)."""
    own = dst.state_dict()
    dst.load_state_dict({k: v for k, v in src.state_dict().items() if k in own})
    return dst


def test_before_the_switch_it_is_rope_and_after_it_repo_on_the_same_weights():
    staged = build_test_model("repo", overrides=["pe.rope_until=0.5"]).eval()
    rope = _shared(staged, build_test_model("rope")).eval()
    repo = build_test_model("repo", seed=1).eval()
    repo.load_state_dict(staged.state_dict())
    with torch.no_grad():
        before = staged(IDX).logits
        assert torch.equal(before, rope(IDX).logits)
        cfg = staged.pe.drop()  # the loop's switch at pe.rope_until
        assert cfg.switched and staged.pe.cfg is cfg
        after = staged(IDX).logits
        assert torch.equal(after, repo(IDX).logits)
        assert (after - before).abs().max() > 1e-4  # the networks re-position layers 1..3 of 4
        rebuilt = build_test_model("repo", overrides=["pe.rope_until=0.5", "pe.switched=true"]).eval()
        rebuilt.load_state_dict(staged.state_dict())  # what a checkpoint's config says after the switch
        assert torch.equal(rebuilt(IDX).logits, after)


@pytest.mark.parametrize("override,message", [
    (["pe.rope_until=0"], r"pe.rope_until is the share .* in \(0, 1\)"),
    (["pe.rope_until=1"], r"in \(0, 1\)"),
    (["pe.rope_until=-0.5"], r"in \(0, 1\)"),
    (["pe.name=rope", "pe.rope_until=0.5"], "unknown config key `pe.rope_until`"),  # RePo's own option
])
def test_a_bad_rope_until_is_refused_before_work(override, message):
    with pytest.raises(ConfigError, match=message) as e:
        load_config(model_size="nano", overrides=["pe.name=repo", *override])
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("override,where", [
    (["pe.name=randomized", "pe.inner={name: repo, rope_until: 0.5}"], "pe.inner"),
    (["pe.name=hybrid", "pe.pattern=[{name: repo, rope_until: 0.5}, {name: none}]"], r"pe.pattern\[0\]"),
    (["pe.name=hybrid", "pe.pattern=[{name: none}, {name: drope}]"], r"pe.pattern\[1\]"),  # DroPE's 0.8 alike
])
def test_a_switch_inside_a_wrapper_or_hybrid_is_refused_it_would_never_happen(override, where):
    with pytest.raises(ConfigError, match=f"{where} = `.*` switches at a point of the budget") as e:
        load_config(model_size="nano", overrides=override)
    assert "\n" not in str(e.value)
    load_config(model_size="nano", overrides=["pe.name=hybrid", "pe.pattern=[{name: repo}, {name: none}]"])


def test_rope_until_enters_the_identity_and_name_only_when_set():
    plain = load_config(model_size="nano", overrides=["pe.name=repo"])
    staged = load_config(model_size="nano", overrides=["pe.name=repo", "pe.rope_until=0.5"])
    switched = load_config(model_size="nano", overrides=["pe.name=repo", "pe.rope_until=0.5", "pe.switched=true"])
    # a one-stage run's identity as recorded before the option existed: no rope_until, no switched
    assert set(identity(plain, "fp")["pe"]) == {"name", "theta", "scaling", "rotary_fraction", "start_share",
                                                "hidden_divisor"}
    assert identity(staged, "fp")["pe"]["rope_until"] == 0.5
    assert identity(switched, "fp") == identity(staged, "fp")  # the stage is meta.json's record, not the run's
    assert run_name(staged, 10**6) == run_name(plain, 10**6) + "_ropeuntil0.5"


def staged_run(tmp_path, *extra):
    # one budget of 4096 tokens = 8 steps of 512; RoPE until 2048 tokens, the networks from step 5
    return train(nano_config(tmp_path, "pe.name=repo", "pe.rope_until=0.5", *SHORT, *extra), SOURCE)


SHORT = ("train.target_budgets=[4096]", "train.ckpt_interval=2", "schedule.warmup_tokens=512")


def test_training_switches_at_its_point_frozen_before_and_resume_across_it_is_exact(tmp_path):
    full = staged_run(tmp_path, "train.run_name=full", "train.keep_last=10")
    staged_run(tmp_path, "train.run_name=part", "train.max_steps=3")  # stops before the switch
    staged_run(tmp_path, "train.run_name=part", "train.resume=auto", "train.max_steps=3")  # stops after it (step 6)
    rest = staged_run(tmp_path, "train.run_name=part", "train.resume=auto")  # resumes a switched checkpoint
    assert rest["step"] == full["step"] == 8
    a, b = losses(full["run_dir"]), losses(Path(tmp_path) / "part")
    assert sorted(a) == sorted(b) == list(range(1, 9))
    assert all(a[s] == b[s] for s in a), "per-step losses must be bit-identical across the switch and resume"
    # the RoPE stage is RoPE's logits (test above); a one-stage RePo run from the same init differs from step 1
    one = train(nano_config(tmp_path, "train.run_name=one", "pe.name=repo", *SHORT, "train.max_steps=1"), SOURCE)
    assert losses(one["run_dir"])[1] != a[1]
    # the networks at the switch are their init, bit for bit: no gradient, no decay before it (AdamW skips them)
    cfg = nano_config(tmp_path, "pe.name=repo", "pe.rope_until=0.5")
    torch.manual_seed(cfg.seed)  # as training/start.py builds the run's model
    init = build_model(cfg.model, cfg.pe, "cpu").state_dict()
    run = Path(full["run_dir"])
    for step, switched in ((2, False), (4, False), (6, True), (8, True)):
        step_dir = ckpt.step_dir(run, step)
        meta = json.loads((step_dir / "meta.json").read_text())
        assert ("pe_dropped_at_tokens" in meta) == switched and meta.get("pe_dropped_at_tokens", 2048) == 2048
        loaded = load_model(step_dir).model  # eval.py's loader builds the stage the weights are in
        assert loaded.pe.cfg.switched is switched
        weights = torch.load(step_dir / "model.pt", weights_only=True)
        same = [torch.equal(weights[f"pe.{n}"], init[f"pe.{n}"]) for n in NETWORKS]
        assert same == [not switched] * 3, (step, same)
    # a switched checkpoint does not continue under a schedule that would train it as RoPE again: a branch to a
    # budget of 16384 tokens switches at its 0.5, 8192 tokens, after the checkpoint's 4096
    latest = run / "latest"
    with pytest.raises(ConfigError, match="its PE switched at 2,048 tokens.*only at 8,192 tokens"):
        staged_run(tmp_path, "train.run_name=b", f"train.branch_from={latest}", "train.budget=16384")
