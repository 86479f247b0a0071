"""Item 13, resuming: a refused resume names the field that changed (`model.attention`, not "its model"); a
resume forced past a change of the model's tensors (train.allow_resume_mismatch with the sinks dropped) blames the
config, not a healthy checkpoint (exit 2, not 4); a branch checkpoint deleted since is remade when the run passes its
point again, and reported when it cannot be."""

import shutil
from pathlib import Path

import pytest

from posbench.errors import EXIT_BAD_INPUT, CheckpointError, ConfigError
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from posbench.training.rundir import identity_diffs
from tests.training.helpers import nano_config

SOURCE = RandomTokens(512, 64)


def test_item13_identity_diffs_name_the_field_and_both_values():
    saved = {"model": {"attention": "sdpa", "d_model": 64}, "pe": {"name": "rope", "theta": 1e4}, "data": "d",
             "seed": 1}
    now = {"model": {"attention": "eager", "d_model": 64}, "pe": {"name": "rope", "theta": 5e5}, "data": "d",
           "seed": 1}
    assert identity_diffs(saved, now) == ("model.attention (checkpoint: sdpa, this run: eager), pe.theta (checkpoint: "
                                          "10000.0, this run: 500000.0)")


def test_item13_resume_after_a_kernel_change_names_model_attention(tmp_path):
    train(nano_config(tmp_path, "train.run_name=r", "train.max_steps=2", "model.attention=sdpa"), SOURCE)
    with pytest.raises(ConfigError, match=r"its model.attention \(checkpoint: sdpa, this run: eager\) differ"):
        train(nano_config(tmp_path, "train.run_name=r", "train.resume=auto", "model.attention=eager"), SOURCE)


def test_item13_forced_resume_without_the_sinks_blames_the_config_not_the_checkpoint(tmp_path):
    first = train(nano_config(tmp_path, "train.run_name=r", "train.max_steps=2", "model.attention_sinks=true"),
                  SOURCE)
    latest = Path(first["run_dir"]) / "latest"
    with pytest.raises(ConfigError) as e:
        train(nano_config(tmp_path, "train.run_name=r2", f"train.resume={latest}", "train.allow_resume_mismatch=true"),
              SOURCE)
    assert not isinstance(e.value, CheckpointError) and e.value.exit_code == EXIT_BAD_INPUT
    message = str(e.value)
    assert "attention_sinks (checkpoint: true, this run: false)" in message
    assert "blocks.0.attn.sinks" in message and "damaged" not in message and "edited" not in message


def test_item13_a_deleted_branch_checkpoint_is_remade_when_the_run_passes_its_point_again(tmp_path, capsys):
    """Budgets 8,192 and 16,384 tokens: the 8,192 budget's branch checkpoint is saved before its decay."""
    first = train(nano_config(tmp_path, "train.run_name=b", "train.max_steps=20"), SOURCE)
    run_dir = Path(first["run_dir"])
    link = run_dir / "branch_8.19K"
    branch = link.resolve()
    assert link.is_symlink() and branch.is_dir()
    # delete the branch checkpoint and every checkpoint after it: the resume continues from before its point
    steps = sorted(p for p in run_dir.glob("step_*") if p.name >= branch.name)
    for p in steps:
        shutil.rmtree(p)
    capsys.readouterr()
    train(nano_config(tmp_path, "train.run_name=b", "train.resume=auto"), SOURCE)
    out = "".join(capsys.readouterr())
    assert f"{link.name} linked to {branch.name}, which is gone" in out and "saving it again" in out
    assert link.is_symlink() and link.resolve().is_dir() and (link.resolve() / "meta.json").is_file()


def test_item13_a_deleted_branch_checkpoint_the_run_cannot_remake_is_reported(tmp_path, capsys):
    first = train(nano_config(tmp_path, "train.run_name=b"), SOURCE)  # the whole run, both budgets
    link = Path(first["run_dir"]) / "branch_8.19K"
    gone = link.resolve()
    shutil.rmtree(gone)
    capsys.readouterr()
    train(nano_config(tmp_path, "train.run_name=b", "train.resume=auto"), SOURCE)
    out = "".join(capsys.readouterr())
    assert f"warning: {link.name} linked to {gone.name}, which is gone" in out
    assert "cannot save it again" in out and "--branch-from" in out
