"""Downloads against a loopback server with the hub's URL layout: complete, retried, verified."""

import hashlib
import json

import pytest
from data_helpers import FakeHub, data_config, fake_docs, parquet_bytes, shard_files

from posbench.data.download import Downloader, select_files
from posbench.data.layout import DataLayout
from posbench.errors import DownloadError


def run_download(cfg, max_train=None):
    layout = DataLayout.from_config(cfg)
    files = layout.source.remote_files(timeout=10)
    return Downloader(layout.source, cfg.download).run(select_files(files, cfg.splits, max_train)), layout


def test_downloads_complete_verified_and_rerun_fetches_nothing(tmp_path):
    files = shard_files(5)
    with FakeHub(files, page_size=2) as hub:  # tree API paginated over 3 pages
        cfg = data_config(tmp_path, endpoint=hub.url, num_shards=5)
        report, layout = run_download(cfg)
        assert sorted(report.downloaded) == sorted(files)
        for name, data in files.items():
            assert (layout.raw_dir / name).read_bytes() == data
        manifest = json.loads((layout.raw_dir / "manifest.json").read_text())["files"]
        assert {k: v["sha256"] for k, v in manifest.items()} == {k: hashlib.sha256(d).hexdigest()
                                                                 for k, d in files.items()}
        assert {v["checked"] for v in manifest.values()} == {"sha256"}
        assert not list(layout.raw_dir.glob("*.part"))
        n_gets = len(hub.gets)
        report2, _ = run_download(cfg)
        assert report2.downloaded == [] and sorted(report2.skipped) == sorted(files)
        assert len(hub.gets) == n_gets == 5  # the second run sent no file request at all


def test_dropped_connections_503_and_429_are_retried_and_resumed(tmp_path):
    files = shard_files(3)
    name = "shard_00002.parquet"
    with FakeHub(files) as hub:
        hub.faults[name] = ["drop:300", "503", "429", "drop:1000"]
        cfg = data_config(tmp_path, endpoint=hub.url, num_shards=3)
        report, layout = run_download(cfg)
        assert (layout.raw_dir / name).read_bytes() == files[name]
        ranges = [r for p, r in hub.ranges if p == name]
        # 1st: whole file, dropped after 300 bytes -> resumed from 300 (503, 429, then dropped at 300+1000)
        assert ranges == ["", "bytes=300-", "bytes=300-", "bytes=300-", "bytes=1300-"]


def test_gives_up_after_the_configured_retries(tmp_path):
    with FakeHub(shard_files(3)) as hub:
        hub.faults["shard_00000.parquet"] = ["503"] * 10
        cfg = data_config(tmp_path, "data.download.retries=2", endpoint=hub.url, num_shards=3)
        with pytest.raises(DownloadError, match="gave up after 3 attempts"):
            run_download(cfg)
        layout = DataLayout.from_config(cfg)
        assert not (layout.raw_dir / "shard_00000.parquet").exists()
        assert (layout.raw_dir / "shard_00001.parquet").exists()  # the others still finished


@pytest.mark.parametrize("tree, redirect", [(True, True), (False, True), (False, False)])
def test_corrupt_file_is_never_renamed_into_place(tmp_path, tree, redirect):
    # the sha256 comes from the tree API, else the hub's X-Linked-ETag (on the 302), else the ETag
    files = shard_files(3)
    with FakeHub(files, tree=tree, redirect=redirect) as hub:
        hub.faults["shard_00001.parquet"] = ["corrupt"] * 10
        cfg = data_config(tmp_path, endpoint=hub.url, num_shards=3)
        with pytest.raises(DownloadError, match="sha256"):
            run_download(cfg)
        layout = DataLayout.from_config(cfg)
        assert not (layout.raw_dir / "shard_00001.parquet").exists()
        assert not (layout.raw_dir / "shard_00001.parquet.part").exists()
        manifest = json.loads((layout.raw_dir / "manifest.json").read_text())["files"]
        assert sorted(manifest) == ["shard_00000.parquet", "shard_00002.parquet"]
        hub.faults.clear()  # the server recovers: a re-run fetches only the missing file
        report, _ = run_download(cfg)
        assert report.downloaded == ["shard_00001.parquet"]
        assert (layout.raw_dir / "shard_00001.parquet").read_bytes() == files["shard_00001.parquet"]


def test_wrong_size_is_never_renamed_into_place(tmp_path):
    files = shard_files(3)
    with FakeHub(files) as hub:
        hub.tree_size["shard_00000.parquet"] = len(files["shard_00000.parquet"]) + 7  # smaller: test_hostile_hub
        cfg = data_config(tmp_path, endpoint=hub.url, num_shards=3)
        with pytest.raises(DownloadError, match=f"got {len(files['shard_00000.parquet'])} bytes but the tree API"):
            run_download(cfg)
        layout = DataLayout.from_config(cfg)
        assert not (layout.raw_dir / "shard_00000.parquet").exists()
        assert not (layout.raw_dir / "shard_00000.parquet.part").exists()


def test_missing_file_fails_at_once_with_a_hint(tmp_path):
    with FakeHub(shard_files(3)) as hub:
        cfg = data_config(tmp_path, endpoint=hub.url, num_shards=5)
        with pytest.raises(DownloadError, match="HTTP 404.*num_shards"):
            run_download(cfg)
        assert hub.gets.count("shard_00004.parquet") == 0  # 404s come from the resolve URL, no retry loop


def test_max_train_shards_takes_val_filler_and_the_first_train_files(tmp_path):
    with FakeHub(shard_files(8)) as hub:
        cfg = data_config(tmp_path, "data.splits.val={start: 6, stop: 7}", "data.splits.filler={start: 7, stop: 8}",
                          "data.splits.train={start: 0, stop: 6}", endpoint=hub.url, num_shards=8)
        report, _ = run_download(cfg, max_train=2)
        assert sorted(report.downloaded) == [f"shard_{i:05d}.parquet" for i in (0, 1, 6, 7)]


def test_hub_tree_source_lists_a_folder(tmp_path):
    files = {f"sample/10BT/{i:03d}_00000.parquet": parquet_bytes(fake_docs(10, i)) for i in range(3)}
    files["sample/350BT/000_00000.parquet"] = parquet_bytes(fake_docs(5, 9))
    files["README.md"] = b"# card"
    with FakeHub(files, repo="HuggingFaceFW/fineweb-edu") as hub:
        cfg = data_config(tmp_path, "data.source={name: hub_tree, folder: sample/10BT}",
                          "data.splits.train={start: 2, stop: null}", endpoint=hub.url, num_shards=None)
        report, layout = run_download(cfg)
        assert sorted(report.downloaded) == [f"sample/10BT/{i:03d}_00000.parquet" for i in range(3)]
        assert [(f.index, f.path.name) for f in layout.source.inputs()] == [
            (0, "000_00000.parquet"), (1, "001_00000.parquet"), (2, "002_00000.parquet")]


def test_hf_endpoint_environment_variable(tmp_path, monkeypatch):
    with FakeHub(shard_files(3)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        report, _ = run_download(data_config(tmp_path, num_shards=3))
        assert len(report.downloaded) == 3


def test_unreachable_endpoint_fails_before_any_download(tmp_path):
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = data_config(tmp_path, endpoint=f"http://127.0.0.1:{port}", num_shards=3)
    with pytest.raises(DownloadError, match="cannot reach the hub"):
        run_download(cfg)
    assert not DataLayout.from_config(cfg).raw_dir.exists()
