"""A run dir copied with links dereferenced (`cp -rL`, rsync -L): `latest` arrives as a real directory.

Training from the copy must not fail its saves (before: IsADirectoryError at every save, exit 4, after the whole
budget was spent), and evaluation must read the step `latest` stands for, saying which it read.
"""

import os
import shutil

from posbench.evaluation.loading import resolve_checkpoint
from posbench.training import checkpoint as ckpt
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from tests.training.helpers import losses, nano_config

SOURCE = RandomTokens(512, 64)


def copy_dereferenced(run, to):
    shutil.copytree(run, to, symlinks=False)  # what `cp -rL` does: every link becomes a copy of its target
    assert (to / "latest").is_dir() and not (to / "latest").is_symlink()
    return to


def test_a_dereferenced_copy_resumes_and_its_latest_becomes_a_link_again(tmp_path, capsys):
    full = train(nano_config(tmp_path / "a", "train.run_name=full"), SOURCE)
    part = train(nano_config(tmp_path / "a", "train.run_name=part", "train.max_steps=11"), SOURCE)
    copy = copy_dereferenced(part["run_dir"], tmp_path / "b" / "part")
    capsys.readouterr()
    rest = train(nano_config(tmp_path / "b", "train.run_name=part", "train.resume=auto"), SOURCE)
    out = capsys.readouterr().out
    assert "latest was a directory, not a link" in out and "removed it (an identical copy of step_00000011)" in out
    assert rest["step"] == full["step"] == 32
    assert (copy / "latest").is_symlink() and os.readlink(copy / "latest") == "step_00000032"
    a, b = losses(full["run_dir"]), losses(copy)
    assert all(a[s] == b[s] for s in a), "the copy resumed exactly where its `latest` was"
    assert [p.name for p in copy.iterdir() if p.name.startswith(".")] == [".lock"]  # no copy kept aside


def test_a_copied_latest_whose_step_is_missing_becomes_that_step(tmp_path, capsys):
    part = train(nano_config(tmp_path / "a", "train.run_name=part", "train.max_steps=11"), SOURCE)
    copy = copy_dereferenced(part["run_dir"], tmp_path / "b" / "part")
    shutil.rmtree(copy / "step_00000011")  # e.g. copied `latest` alone
    ckpt.repair_links(copy)
    assert "moved it to step_00000011 (that step was missing)" in capsys.readouterr().out
    assert os.readlink(copy / "latest") == "step_00000011" and ckpt.read_meta(copy / "step_00000011")["step"] == 11


def test_eval_of_a_copy_reads_the_step_latest_stands_for_and_says_so(tmp_path, capsys):
    part = train(nano_config(tmp_path / "a", "train.run_name=part", "train.max_steps=11"), SOURCE)
    copy = copy_dereferenced(part["run_dir"], tmp_path / "b" / "part")
    capsys.readouterr()
    assert resolve_checkpoint(copy) == copy / "step_00000011"
    note = capsys.readouterr().err
    assert "latest is a directory, not a link" in note and f"reading {copy / 'step_00000011'}" in note
    # a stale copy: `latest` is a copy of step 8 while the run went on to step 11
    shutil.rmtree(copy / "latest")
    shutil.copytree(copy / "step_00000008", copy / "latest")
    assert resolve_checkpoint(copy / "latest") == copy / "step_00000008"
    note = capsys.readouterr().err
    assert "a copy of step 8" in note and "newer checkpoint, step_00000011" in note
