"""Checkpoint files on disk: atomic writes, fallbacks, pruning, run directories."""

import json

import pytest
import torch

from posbench.errors import CheckpointError, ConfigError, DiskFullError
from posbench.training import checkpoint as ckpt
from posbench.training.rundir import check_run_name, claim_run_dir, find_run_dir, format_tokens


def _save(run_dir, step, kind="periodic"):
    return ckpt.save(run_dir, step, {"w": torch.full((3,), float(step))}, {"state": {}, "param_groups": []},
                     {"step": step, "tokens": step * 10, "kind": kind}, "seed: 1\n")


def test_save_load_roundtrip_weights_only(tmp_path):
    path = _save(tmp_path, 5)
    loaded = ckpt.load(tmp_path / "latest")
    assert loaded.path == path and loaded.meta["tokens"] == 50 and loaded.model["w"].tolist() == [5.0] * 3
    assert loaded.rng is not None and "torch" in loaded.rng
    torch.load(path / "model.pt", weights_only=True)  # must not need pickle of arbitrary objects


def test_corrupt_latest_falls_back_to_previous(tmp_path):
    _save(tmp_path, 1)
    newest = _save(tmp_path, 2)
    (newest / "model.pt").write_bytes((newest / "model.pt").read_bytes()[:20])  # truncated
    messages = []
    loaded = ckpt.load_latest_valid(tmp_path, log=messages.append)
    assert loaded.meta["step"] == 1
    assert "step_00000002" in messages[0] and "corrupt" in messages[0]


def test_partial_temp_dir_is_not_a_checkpoint_and_is_cleaned(tmp_path):
    _save(tmp_path, 1)
    partial = tmp_path / ".tmp_step_00000002"
    partial.mkdir()
    (partial / "model.pt").write_bytes(b"half")
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_00000001"]
    assert ckpt.cleanup_partial(tmp_path) == [partial] and not partial.exists()


def test_prune_keeps_last_k_and_branch_and_final(tmp_path):
    for step, kind in [(1, "periodic"), (2, "branch"), (3, "periodic"), (4, "periodic"), (5, "periodic"),
                       (6, "final")]:
        _save(tmp_path, step, kind)
    ckpt.prune(tmp_path, keep_last=2)
    kept = [json.loads((p / "meta.json").read_text())["step"] for p in ckpt.list_checkpoints(tmp_path)]
    assert kept == [2, 4, 5, 6]


def test_prune_spares_the_best_link_target_only(tmp_path):
    for step, kind in [(1, "best"), (2, "best"), (3, "periodic"), (4, "periodic"), (5, "periodic")]:
        _save(tmp_path, step, kind)
    ckpt.point_link(tmp_path, "best", ckpt.step_dir(tmp_path, 2))
    ckpt.prune(tmp_path, keep_last=2)
    kept = [json.loads((p / "meta.json").read_text())["step"] for p in ckpt.list_checkpoints(tmp_path)]
    assert kept == [2, 4, 5]  # the superseded best (1) is pruned like any periodic checkpoint
    assert ckpt.load(tmp_path / "best").meta["step"] == 2


def test_disk_full_reports_path_and_keeps_previous(tmp_path, monkeypatch):
    _save(tmp_path, 1)
    # ENOSPC at the file write inside the real torch.save, which surfaces as RuntimeError, not OSError
    monkeypatch.setenv("POSBENCH_ENOSPC_DURING_SAVE", "2")
    with pytest.raises(DiskFullError, match=r"step_00000002 \(disk full\).*step_00000001 is intact"):
        _save(tmp_path, 2)
    assert ckpt.load(tmp_path / "latest").meta["step"] == 1
    assert not list(tmp_path.glob(".tmp_*"))


def test_run_dir_versions_by_identity(tmp_path):
    a, b = {"model": 1}, {"model": 2}
    d1, existed = find_run_dir(tmp_path, "tiny_rope_1B_s1", a)
    assert d1.name == "tiny_rope_1B_s1" and not existed
    claim_run_dir(d1, a)
    d2, _ = find_run_dir(tmp_path, "tiny_rope_1B_s1", b)
    assert d2.name == "tiny_rope_1B_s1_v2"
    claim_run_dir(d2, b)
    assert find_run_dir(tmp_path, "tiny_rope_1B_s1", a) == (d1, True)
    assert find_run_dir(tmp_path, "tiny_rope_1B_s1", b) == (d2, True)


@pytest.mark.parametrize("name", ["..", "../x", "/abs/run", "a/b", "", ".hidden"])
def test_unsafe_run_names(name):
    with pytest.raises(ConfigError, match="unsafe run name"):
        check_run_name(name)


def test_format_tokens():
    assert [format_tokens(n) for n in (2.35e9, 5.9e8, 12_000, 999)] == ["2.35B", "590M", "12K", "999"]


def test_resume_auto_with_every_checkpoint_corrupt_raises(tmp_path):
    for step in (1, 2):
        model = _save(tmp_path, step) / "model.pt"
        model.write_bytes(model.read_bytes()[:20])
    with pytest.raises(CheckpointError, match="all 2 checkpoints .* are corrupt"):
        ckpt.load_latest_valid(tmp_path, log=lambda *_: None)
    assert ckpt.load_latest_valid(tmp_path / "empty") is None  # nothing saved yet: a fresh start


def test_prune_quarantines_unreadable_meta_and_counts_only_valid(tmp_path):
    for step in (1, 2, 3, 4):
        _save(tmp_path, step)
    (tmp_path / "step_00000003" / "meta.json").write_text("")  # empty, as after a crash on an old filesystem
    messages = []
    ckpt.prune(tmp_path, keep_last=2, log=messages.append)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_00000002", "step_00000004"]
    assert (tmp_path / ".quarantine_step_00000003" / "model.pt").is_file()
    assert "step_00000003/meta.json is unreadable" in messages[0]
    _save(tmp_path, 5)  # later saves keep working
    ckpt.prune(tmp_path, keep_last=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_00000004", "step_00000005"]


def test_resaving_a_step_never_loses_the_old_copy(tmp_path, monkeypatch):
    old = _save(tmp_path, 1)
    real_replace = ckpt.os.replace

    def fail_new_rename(src, dst):  # the rename of the new copy into place fails (e.g. EIO)
        if str(src).endswith(".tmp_step_00000001"):
            raise OSError(5, "Input/output error")
        return real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", fail_new_rename)
    with pytest.raises(CheckpointError, match="step_00000001"):
        _save(tmp_path, 1)
    assert ckpt.load(old).model["w"].tolist() == [1.0] * 3
    assert not list(tmp_path.glob(".old_*")) and not list(tmp_path.glob(".tmp_*"))


def test_a_kill_between_moving_aside_and_renaming_in_restores_the_old_copy(tmp_path):
    old = _save(tmp_path, 1)
    old.rename(tmp_path / ".old_step_00000001")  # state a kill at that instant leaves
    ckpt.cleanup_partial(tmp_path)
    assert ckpt.load(old).meta["step"] == 1


def test_a_branch_parent_outside_out_dir_is_not_read(tmp_path, capsys):
    """Paths from a checkpoint's meta stay where they belong: the parent run_dir recorded in meta.json is
    followed only inside train.out_dir (where branch parents live); elsewhere its metrics are not read."""
    from posbench.training.loggers import parent_history

    rows = [{"tokens": t, "loss": 5.0 - t / 100} for t in (100, 200, 300)]
    for where in ("runs/parent", "elsewhere/parent"):
        (tmp_path / where).mkdir(parents=True)
        (tmp_path / where / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out_dir = tmp_path / "runs"
    inside = {"run": "parent", "run_dir": str(out_dir / "parent"), "tokens": 200}
    assert parent_history(inside, str(out_dir)) == rows[:2]
    for run_dir in (str(tmp_path / "elsewhere" / "parent"), str(out_dir / ".." / "elsewhere" / "parent"), ""):
        assert parent_history({**inside, "run_dir": run_dir}, str(out_dir)) == []
        assert "is not inside train.out_dir" in capsys.readouterr().out
