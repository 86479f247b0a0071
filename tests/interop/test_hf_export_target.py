"""Where an export lands: a staging directory beside OUT, renamed into place once checked.

Before: `export_hf.py CKPT OUT` on a non-empty OUT replaced the user's README.md and config.json (exit 0), mixed
old files with new ones, and a conflicting entry (a directory named like one of our files) left a partial
export; model.safetensors came out 0600. Now a non-empty OUT is refused (exit 2, one line) unless --overwrite,
which replaces it whole; files get the modes `cp` gives.
"""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from posbench.errors import (
    BadInputError,  # noqa: E402
    ConfigError,
)
from posbench.fileio import LinkError  # noqa: E402
from posbench.interop import hf_export  # noqa: E402
from tests.interop.test_hf_export import checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
QUIET = {"log": lambda *_: None}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return checkpoint(tmp_path_factory.mktemp("ckpt"), "rope")


def users_dir(path: Path) -> dict[str, bytes]:
    path.mkdir(parents=True)
    files = {"README.md": b"# my notes\n", "config.json": b'{"mine": true}\n', "keep.txt": b"precious\n"}
    for name, data in files.items():
        (path / name).write_bytes(data)
    return files


def leftovers(parent: Path, out: Path) -> list[str]:
    """Staging or moved-aside directories of `out` still in `parent`."""
    return [p.name for p in parent.iterdir() if p.name.startswith(f".{out.name}.")]


def test_a_non_empty_target_is_refused_with_exit_2_and_left_alone(run, tmp_path):
    out = tmp_path / "hf"
    files = users_dir(out)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "export_hf.py"), str(run), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: {out} is not empty (3 entries: README.md, config.json, keep.txt)")
    assert "--overwrite" in line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files
    assert leftovers(tmp_path, out) == []


def test_overwrite_replaces_the_target_whole(run, tmp_path):
    out = tmp_path / "hf"
    users_dir(out)
    (out / "tokenizer.json").mkdir()  # an entry in the way of one of ours: before, a partial export
    hf_export.export(run, out, overwrite=True, **QUIET)
    names = {p.name for p in out.iterdir()}
    assert "keep.txt" not in names and {"config.json", "model.safetensors", "README.md"} <= names
    assert (out / "tokenizer.json").is_file() and b"mine" not in (out / "config.json").read_bytes()
    assert leftovers(tmp_path, out) == []


def test_an_empty_or_missing_target_needs_no_flag_and_files_get_cp_modes(run, tmp_path):
    old = os.umask(0o022)
    try:
        (tmp_path / "empty").mkdir()
        for out in (tmp_path / "empty", tmp_path / "new" / "hf"):
            hf_export.export(run, out, **QUIET)
            assert stat.S_IMODE(out.stat().st_mode) == 0o755
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
            assert set(modes.values()) == {0o644}, modes  # model.safetensors was 0600
            assert leftovers(out.parent, out) == []
    finally:
        os.umask(old)


def test_a_link_as_target_is_refused_and_its_target_untouched(run, tmp_path):
    files = users_dir(tmp_path / "elsewhere")
    (tmp_path / "hf").symlink_to(tmp_path / "elsewhere")
    for overwrite in (False, True):
        with pytest.raises(LinkError, match="hf is a symbolic link"):
            hf_export.export(run, tmp_path / "hf", overwrite=overwrite, **QUIET)
    assert {p.name: p.read_bytes() for p in (tmp_path / "elsewhere").iterdir()} == files


def test_a_failed_check_leaves_the_old_target_and_no_staging(run, tmp_path, monkeypatch):
    out = tmp_path / "hf"
    files = users_dir(out)

    def broken(*args, **kw):
        raise ConfigError("the exported model's logits differ (test)")

    monkeypatch.setattr(hf_export, "verify", broken)
    with pytest.raises(ConfigError, match="logits differ"):
        hf_export.export(run, out, overwrite=True, **QUIET)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files
    assert leftovers(tmp_path, out) == []


def test_the_refusal_comes_before_any_work(tmp_path):
    out = tmp_path / "hf"
    users_dir(out)
    with pytest.raises(BadInputError, match="is not empty"):
        hf_export.export(tmp_path / "no_such_checkpoint", out, **QUIET)  # the checkpoint is not even looked at
