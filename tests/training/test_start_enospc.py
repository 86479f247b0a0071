"""A full disk at the start of a run: the error names the file it could not write, and the run directory this
start created is removed, so the next start uses the same name (not `_v2`)."""

import errno
import os
from pathlib import Path

import pytest

import posbench.training.rundir as rundir
from posbench.errors import DiskFullError
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from tests.training.helpers import nano_config

SOURCE = RandomTokens(512, 64)


def test_enospc_writing_the_identity_names_it_and_leaves_no_run_dir(tmp_path, monkeypatch):
    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    cfg = nano_config(tmp_path, "train.run_name=r", "train.max_steps=1")
    with monkeypatch.context() as m:
        m.setattr(rundir, "write_text", full)
        with pytest.raises(DiskFullError) as info:
            train(cfg, SOURCE)
    assert str(info.value) == f"cannot write {tmp_path / 'r' / 'identity.json'}: [Errno 28] No space left on device"
    assert info.value.exit_code == 5
    assert not (tmp_path / "r").exists()
    assert Path(train(cfg, SOURCE)["run_dir"]).name == "r"


def test_an_empty_run_dir_left_behind_is_reused(tmp_path):
    (tmp_path / "r").mkdir()  # what a failed start left before this fix
    run = train(nano_config(tmp_path, "train.run_name=r", "train.max_steps=1"), SOURCE)
    assert Path(run["run_dir"]).name == "r" and (tmp_path / "r" / "identity.json").is_file()
