"""The training loop in one process: exact resume, branches, stops, errors before work."""

import json
from pathlib import Path

import pytest

from posbench.errors import ConfigError, NonFiniteError
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from posbench.training.schedule import make_schedule
from tests.training.helpers import losses, lrs, nano_config

SOURCE = RandomTokens(512, 64)


def test_stop_and_resume_is_bit_identical(tmp_path):
    full = train(nano_config(tmp_path, "train.run_name=full"), SOURCE)
    part = train(nano_config(tmp_path, "train.run_name=part", "train.max_steps=11"), SOURCE)
    assert part["stopped"] and part["step"] == 11
    rest = train(nano_config(tmp_path, "train.run_name=part", "train.resume=auto"), SOURCE)
    assert rest["step"] == full["step"] == 32
    a, b = losses(full["run_dir"]), losses(part["run_dir"])
    assert sorted(a) == sorted(b) == list(range(1, 33))
    assert all(a[s] == b[s] for s in a), "per-step losses must be bit-identical after resume"


def test_a_checkpoint_from_before_the_step_was_the_only_cursor_resumes(tmp_path):
    """Older checkpoints also stored `data_cursor` ({"next_step": step}) in meta.json; it is ignored when read."""
    full = train(nano_config(tmp_path, "train.run_name=full"), SOURCE)
    part = train(nano_config(tmp_path, "train.run_name=old", "train.max_steps=11"), SOURCE)
    for meta_file in Path(part["run_dir"]).glob("step_*/meta.json"):
        meta = json.loads(meta_file.read_text())
        assert "data_cursor" not in meta
        meta_file.write_text(json.dumps({**meta, "data_cursor": {"next_step": meta["step"]}}))
    rest = train(nano_config(tmp_path, "train.run_name=old", "train.resume=auto"), SOURCE)
    assert rest["step"] == full["step"]
    a, b = losses(full["run_dir"]), losses(part["run_dir"])
    assert sorted(a) == sorted(b) and all(a[s] == b[s] for s in a)


def test_existing_run_requires_resume_flag(tmp_path):
    train(nano_config(tmp_path, "train.run_name=r", "train.max_steps=2"), SOURCE)
    with pytest.raises(ConfigError, match="--resume auto"):
        train(nano_config(tmp_path, "train.run_name=r"), SOURCE)


def test_changed_model_gets_a_new_versioned_dir_and_resume_mismatch_is_refused(tmp_path):
    first = train(nano_config(tmp_path, "train.run_name=r", "train.max_steps=2"), SOURCE)
    other = train(nano_config(tmp_path, "train.run_name=r", "train.max_steps=2", "model.n_layers=3"), SOURCE)
    assert Path(other["run_dir"]).name == "r_v2"
    latest = Path(first["run_dir"]) / "latest"
    with pytest.raises(ConfigError, match=r"its model.n_layers \(checkpoint: 2, this run: 3\) differ"):
        train(nano_config(tmp_path, "train.run_name=r3", f"train.resume={latest}", "model.n_layers=3"), SOURCE)
    with pytest.raises(ConfigError, match=r"its seed \(checkpoint: 42, this run: 7\) differ"):
        train(nano_config(tmp_path, "train.run_name=r4", f"train.resume={latest}", "seed=7"), SOURCE)


def test_branch_runs_the_decay_of_its_budget(tmp_path):
    main = train(nano_config(tmp_path, "train.run_name=main", "logging.wandb=offline"), SOURCE)
    run_dir = Path(main["run_dir"])
    branch_small = run_dir / "branch_8.19K"
    assert branch_small.is_symlink()
    meta = json.loads((branch_small / "meta.json").read_text())
    cfg = nano_config(tmp_path, f"train.branch_from={branch_small}", "train.budget=8192", "logging.wandb=offline")
    out = train(cfg, SOURCE)
    bdir = Path(out["run_dir"])
    assert bdir.name == "nano_rope_8.19K_s42" and out["tokens"] == 8192
    final_meta = json.loads((bdir / "latest" / "meta.json").read_text())
    assert final_meta["parent"]["run"] == "main" and final_meta["parent"]["step"] == meta["step"]
    # learning rates: the pure schedule of budget 8192 (same warmup as the main run)
    sched = make_schedule(cfg.schedule, cfg.optim.lr, 8192, 8192)
    got = lrs(bdir)
    assert got == {s: sched.lr((s - 1) * 512) for s in range(meta["step"] + 1, 17)}
    # up to the branch point the main run's lrs are the same function
    assert all(lrs(run_dir)[s] == sched.lr((s - 1) * 512) for s in range(1, meta["step"] + 1))
    # WandB offline files exist for both, with tokens as the step metric
    for d in (run_dir, bdir):
        assert list((d / "wandb").glob("offline-run-*/run-*.wandb"))


def test_branch_from_largest_budget_reproduces_main_run(tmp_path):
    main = train(nano_config(tmp_path, "train.run_name=main", "train.target_budgets=[8192,16384]"), SOURCE)
    # the main run saved a branch point only for the smaller budget; the largest decays in-run, so a branch
    # of the largest budget from the small one's branch point must follow the main run exactly
    branch = Path(main["run_dir"]) / "branch_8.19K"
    out = train(nano_config(tmp_path, f"train.branch_from={branch}", "train.budget=16384"), SOURCE)
    a, b = losses(main["run_dir"]), losses(out["run_dir"])
    assert all(a[s] == b[s] for s in b) and max(b) == 32
    assert lrs(main["run_dir"])[32] == lrs(out["run_dir"])[32]


def test_nan_stops_before_the_update(tmp_path, monkeypatch):
    monkeypatch.setenv("POSBENCH_INJECT_NAN", "3,0")
    with pytest.raises(NonFiniteError, match="non-finite loss at step 3 on rank 0"):
        train(nano_config(tmp_path, "train.run_name=nan", "train.ckpt_interval=2"), SOURCE)


@pytest.mark.parametrize("override,message", [
    ("train.global_batch_tokens=500", "not divisible by micro_batch x seq_len"),
    ("schedule.warmup_tokens=8000", "does not add up"),
    ("train.keep_last=1", "keep_last must be >= 2"),
    ("train.resume=/nonexistent/step_1", "does not exist"),
    ("train.run_name=../escape", "unsafe run name"),
    ("train.run_name=/abs", "unsafe run name"),
])
def test_bad_inputs_fail_before_any_work(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        train(nano_config(tmp_path, override), SOURCE)
    assert not list(tmp_path.rglob("step_*"))


def test_random_source_validation_rows_differ_from_training_rows():
    x_train, _ = SOURCE.samples([0, 1])
    x_val, _ = SOURCE.val_samples([0, 1])
    assert not (x_train == x_val).all(dim=1).any()


def test_compiled_runs_cut_the_fused_loss_into_at_most_four_chunks():
    """Dynamo unrolls the fused loss's loop over chunks (144 s of compile for tiny's 64 chunks on an H100): under
    train.compile a micro-batch's tokens go in at most COMPILED_MAX_CHUNKS chunks; uncompiled runs keep theirs."""
    from posbench.config import load_config
    from posbench.training.plan import COMPILED_MAX_CHUNKS, loss_chunk_tokens

    tiny = load_config(model_size="tiny")  # micro_batch 32 x seq_len 1,024, V 65,536: the fused loss
    assert (tiny.train.micro_batch, tiny.model.seq_len, COMPILED_MAX_CHUNKS) == (32, 1024, 4)
    assert loss_chunk_tokens(tiny) == 512
    compiled = load_config(model_size="tiny", overrides=["train.compile=true"])
    assert loss_chunk_tokens(compiled) == 32 * 1024 // 4
    wider = load_config(model_size="tiny", overrides=["train.compile=true", "train.loss_chunk_tokens=16384"])
    assert loss_chunk_tokens(wider) == 16384  # a larger configured chunk is kept
    odd = load_config(model_size="tiny", overrides=["train.compile=true", "train.micro_batch=3"])
    assert loss_chunk_tokens(odd) == 768  # ceil(3,072 / 4)
    plain = load_config(model_size="tiny", overrides=["train.compile=true", "train.loss=full"])
    assert loss_chunk_tokens(plain) == 0
