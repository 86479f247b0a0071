"""Symbolic links planted where posbench writes (data roots, run dirs, eval outputs) never redirect a write.

On shared storage anyone who can write into a data root or a run dir could plant `metrics.jsonl -> ~/.bashrc`;
each test plants a link for one kind of file the tools write, runs the writer, and checks that the file outside
is byte for byte untouched and that the writer either refused with a one-line error naming the link, or replaced
the link itself (an atomic write renames over it). The `latest` link the checkpoint code makes is kept.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from data_helpers import FakeHub, data_config, shard_files  # noqa: E402

from posbench.data.download import Downloader, select_files  # noqa: E402
from posbench.data.layout import DataLayout  # noqa: E402
from posbench.data.manifest import Manifest  # noqa: E402
from posbench.data.shards import write_shard  # noqa: E402
from posbench.errors import EXIT_BAD_INPUT, CheckpointError, DownloadError  # noqa: E402
from posbench.fileio import DirLock, LinkError, write_text  # noqa: E402
from posbench.training import checkpoint as ckpt  # noqa: E402
from posbench.training.loggers import JsonlLogger  # noqa: E402

SECRET = b"the victim's own file\n"


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file outside every posbench folder that a planted link points at."""
    path = tmp_path / "outside" / "victim.txt"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    return path


def plant(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def untouched(victim: Path) -> bool:
    return victim.read_bytes() == SECRET and sorted(p.name for p in victim.parent.iterdir()) == ["victim.txt"]


def test_part_file_link_is_refused_and_the_other_files_finish(tmp_path, victim):
    files = shard_files(3)
    with FakeHub(files) as hub:
        cfg = data_config(tmp_path / "root", endpoint=hub.url, num_shards=3)
        layout = DataLayout.from_config(cfg)
        link = plant(layout.raw_dir / "shard_00001.parquet.part", victim)
        with pytest.raises(DownloadError, match=r"1 of 3 files failed.*shard_00001.parquet.part is a symbolic link"):
            Downloader(layout.source, cfg.download).run(select_files(layout.source.remote_files(timeout=10),
                                                                     cfg.splits, None))
        assert untouched(victim) and link.is_symlink()
        assert (layout.raw_dir / "shard_00000.parquet").read_bytes() == files["shard_00000.parquet"]
        assert not (layout.raw_dir / "shard_00001.parquet").exists()


def test_folder_link_under_the_raw_dir_is_refused(tmp_path, victim):
    files = {f"sample/{name}": data for name, data in shard_files(2).items()}
    with FakeHub(files, repo="org/tree") as hub:
        cfg = data_config(tmp_path / "root", "data.source={name: hub_tree, repo: org/tree, folder: ''}",
                          "data.splits={val: {start: 0, stop: 1}, filler: {start: 1, stop: 1}, "
                          "train: {start: 1, stop: null}}", endpoint=hub.url, num_shards=None)
        layout = DataLayout.from_config(cfg)
        plant(layout.raw_dir / "sample", victim.parent)
        with pytest.raises(DownloadError, match="sample is a symbolic link"):
            Downloader(layout.source, cfg.download).run(layout.source.remote_files(timeout=10))
    assert untouched(victim)


def test_lock_file_link_is_refused(tmp_path, victim):
    plant(tmp_path / "run" / ".lock", victim)
    with pytest.raises(LinkError, match=r"\.lock is a symbolic link") as err, DirLock(tmp_path / "run", "training"):
        pass
    assert err.value.exit_code == EXIT_BAD_INPUT and "\n" not in str(err.value)
    assert untouched(victim)


def test_metrics_jsonl_link_is_refused(tmp_path, victim):
    logger = JsonlLogger(plant(tmp_path / "run" / "metrics.jsonl", victim))
    with pytest.raises(LinkError, match="metrics.jsonl is a symbolic link"):
        logger.log({"step": 1, "tokens": 512, "loss": 3.0})
    assert untouched(victim)


def _save(run_dir: Path, step: int):
    return ckpt.save(run_dir, step, {"w": torch.zeros(3)}, {"state": {}, "param_groups": []},
                     {"step": step, "tokens": step * 10, "kind": "periodic"}, "seed: 1\n")


@pytest.mark.parametrize("name", ["model.pt", "optim.pt", "meta.json", "config.yaml", "rng_rank0.pt"])
def test_checkpoint_files_are_never_written_through_a_link(tmp_path, victim, name):
    """Each file is created O_EXCL|O_NOFOLLOW in the fresh temp dir: a link there (a race with whoever can write
    the run dir) fails the save, which is reported as a checkpoint error, never written through."""
    original = ckpt._save_tensors

    def plant_then_save(obj, path, step):  # the link appears between mkdir and the file's open
        if not os.path.lexists(path.parent / name):
            plant(path.parent / name, victim)
        original(obj, path, step)

    ckpt._save_tensors = plant_then_save
    try:
        with pytest.raises(CheckpointError, match=f"{name} is a symbolic link"):
            _save(tmp_path / "run", 1)
    finally:
        ckpt._save_tensors = original
    assert untouched(victim)


@pytest.mark.parametrize("name", [".tmp_step_00000002", "step_00000002"])
def test_step_dir_links_are_replaced_not_followed(tmp_path, victim, name):
    run = tmp_path / "run"
    _save(run, 1)
    plant(run / name, victim.parent)
    path = _save(run, 2)
    assert path.is_dir() and not path.is_symlink() and (path / "model.pt").is_file()
    assert os.readlink(run / "latest") == "step_00000002"  # the checkpoint code's own link stays a link
    assert untouched(victim)
    assert not [p for p in run.iterdir() if p.is_symlink() and p.name != "latest"]


def test_a_planted_step_link_is_never_read_nor_pruned(tmp_path, victim):
    run = tmp_path / "run"
    _save(run, 1)
    elsewhere = tmp_path / "elsewhere"
    _save(elsewhere, 9)
    plant(run / "step_00000009", elsewhere / "step_00000009")
    assert [p.name for p in ckpt.list_checkpoints(run)] == ["step_00000001"]
    ckpt.prune(run, keep_last=1)
    assert (elsewhere / "step_00000009" / "model.pt").is_file()


def test_shards_and_manifests_replace_a_link(tmp_path, victim):
    folder = tmp_path / "tokens"
    plant(folder / "train_00002.bin", victim)
    write_shard(folder / "train_00002.bin", torch.arange(5).numpy(), 10, "ab" * 32, 1)
    assert not (folder / "train_00002.bin").is_symlink()
    outside_manifest = victim.parent / "manifest.json"
    outside_manifest.write_text(json.dumps({"version": 1, "kind": "tokens", "files": {}}))
    before = outside_manifest.read_bytes()
    plant(folder / "manifest.json", outside_manifest)
    Manifest(folder / "manifest.json", "tokens").put("train_00002.bin", {"index": 2})
    assert outside_manifest.read_bytes() == before
    assert not (folder / "manifest.json").is_symlink()
    assert json.loads((folder / "manifest.json").read_text())["files"] == {"train_00002.bin": {"index": 2}}
    outside_manifest.unlink()
    assert untouched(victim)


def test_eval_outputs_replace_a_link(tmp_path, victim):
    from posbench.evaluation import eval_plots
    from posbench.evaluation.eval_report import write_checkpoint_report

    out = tmp_path / "run" / "eval" / "latest"
    for name in ("results.json", "summary.md", "plot.png"):
        plant(out / name, victim)
    payload = {"label": "run", "checkpoint": "run/step_1", "step": 1, "tokens": 512, "rope_scaling": None,
               "config": {"model": {"size": "nano", "d_model": 8, "n_layers": 1, "n_heads": 1, "vocab_size": 257,
                                    "seq_len": 64}, "pe": {"name": "rope"}},
               "lengths": [64], "code_version": "test", "device": "cpu", "precision": "fp32", "elapsed_s": 0.1,
               "suites": {}}
    write_checkpoint_report(payload, out)
    eval_plots.lines(out / "plot.png", {"run": ([(1, 1.0), (2, 2.0)], "-", ("#000000", "o"))}, "x", "y", "t")
    assert untouched(victim)
    for name in ("results.json", "summary.md", "plot.png"):
        assert (out / name).is_file() and not (out / name).is_symlink()
    assert json.loads((out / "results.json").read_text())["label"] == "run"


def test_write_text_replaces_a_link_and_its_temp_is_never_a_link(tmp_path, victim):
    link = plant(tmp_path / "report.md", victim)
    write_text(link, "# report\n")
    assert untouched(victim) and link.read_text() == "# report\n" and not link.is_symlink()
