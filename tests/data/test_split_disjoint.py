"""One file in two splits. Before: a listing of `sample/./my_a.txt` and `sample/my_a.txt` put the validation
text into a train shard (download and tokenize both exit 0), and with parallel downloads both entries wrote the
same `.part`. Now listing paths are normalised and deduplicated before splitting, and files of different splits
are also compared by content (sha256), refused naming both."""

import json
import shutil

import pytest
from data_helpers import FakeHub, data_config, fake_docs, parquet_bytes

from posbench.data import hub as hub_api
from posbench.data.download import download_corpus
from posbench.data.layout import DataLayout
from posbench.data.paths import safe_relpath
from posbench.data.tokenize_shards import tokenize
from posbench.errors import DataError, DownloadError

TREE = "data.source={name: hub_tree, repo: org/tree, folder: sample}"
SPLITS = "data.splits={val: {start: 0, stop: 1}, filler: {start: 1, stop: 1}, train: {start: 1, stop: null}}"


class ExtraListingHub(FakeHub):
    """FakeHub whose tree API also lists `extra` entries (other spellings of its files, or conflicting ones)."""

    def __init__(self, files, extra):
        super().__init__(files, repo="org/tree")
        self.extra = extra

    def _handle(self, h):
        if h.path.startswith("/api/"):
            items = [{"type": "file", "path": p, "size": len(d), "lfs": {"oid": self.sha(d), "size": len(d)}}
                     for p, d in sorted(self.files.items())]
            return self._send(h, 200, json.dumps(sorted(items + self.extra, key=lambda i: i["path"])).encode())
        return super()._handle(h)

    def entry(self, path, data):
        return {"type": "file", "path": path, "size": len(data), "lfs": {"oid": self.sha(data), "size": len(data)}}


def three_files():
    return {f"sample/{i:03d}.parquet": parquet_bytes(fake_docs(10, 40 + i)) for i in range(3)}


@pytest.mark.parametrize("name, normal", [("sample/./a.parquet", "sample/a.parquet"), ("./a.parquet", "a.parquet"),
                                          ("a/./././b.parquet", "a/b.parquet"), ("a.parquet", "a.parquet")])
def test_dot_components_are_dropped(name, normal):
    assert safe_relpath(name, "test") == normal


@pytest.mark.parametrize("name", [".", "./.", "a//b", "a/../b", "a/"])
def test_paths_naming_no_file_or_escaping_are_refused(name):
    with pytest.raises(DataError, match="refusing path"):
        safe_relpath(name, "test")


def test_a_file_listed_under_two_spellings_is_one_file_in_one_split(tmp_path):
    files = three_files()
    with ExtraListingHub(files, []) as hub:
        hub.extra = [hub.entry("sample/./000.parquet", files["sample/000.parquet"])]  # sorts first: index 0
        cfg = data_config(tmp_path, TREE, SPLITS, endpoint=hub.url, num_shards=None)
        download_corpus(cfg, log=lambda *_: None)
        assert sorted(hub.gets) == sorted(files)  # each file fetched once
    layout = DataLayout.from_config(cfg)
    assert [(f.index, f.path.name) for f in layout.source.inputs()] == [
        (0, "000.parquet"), (1, "001.parquet"), (2, "002.parquet")]
    tokenize(cfg, log=lambda *_: None)
    shards = {p.name: p.read_bytes() for p in layout.tokens_dir.glob("*.bin")}
    assert sorted(shards) == ["train_00001.bin", "train_00002.bin", "val_00000.bin"]
    assert shards["val_00000.bin"][1024:] not in shards["train_00001.bin"] + shards["train_00002.bin"]


def test_one_path_listed_twice_with_different_contents_is_refused(tmp_path):
    files = three_files()
    with ExtraListingHub(files, []) as hub:
        hub.extra = [hub.entry("sample/./001.parquet", b"something else")]
        cfg = data_config(tmp_path, TREE, SPLITS, endpoint=hub.url, num_shards=None)
        with pytest.raises(DownloadError, match="lists sample/001.parquet twice with different contents"):
            download_corpus(cfg, log=lambda *_: None)
        assert hub.gets == []


@pytest.mark.parametrize("tree", [True, False])
def test_equal_content_in_val_and_train_is_refused_naming_both(tmp_path, tree):
    """With the tree API the listing's sha256 refuses it before anything is fetched; without one (a plain mirror,
    numbered shards) the downloaded files' sha256 does."""
    data = parquet_bytes(fake_docs(10, 1))
    files = {"shard_00000.parquet": data, "shard_00001.parquet": parquet_bytes(fake_docs(10, 2)),
             "shard_00002.parquet": data}
    with FakeHub(files, tree=tree) as hub:
        cfg = data_config(tmp_path, endpoint=hub.url, num_shards=3)  # val 0, filler 1, train 2
        with pytest.raises(DataError, match=r"shard_00000.parquet \(val split\) and shard_00002.parquet \(train "
                                            r"split\) have the same content"):
            download_corpus(cfg, log=lambda *_: None)
        assert sorted(hub.gets) == ([] if tree else sorted(files))


def test_tokenize_refuses_a_val_file_copied_into_the_train_range(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"part_{i}.parquet").write_bytes(parquet_bytes(fake_docs(10, 60 + i)))
    shutil.copyfile(corpus / "part_0.parquet", corpus / "part_3.parquet")  # val's file, again, as a train file
    cfg = data_config(tmp_path / "data", "data.source={name: local, paths: ['" + str(corpus) + "/*']}",
                      num_shards=None)
    with pytest.raises(DataError, match=r"part_0.parquet \(val split\) and .*part_3.parquet \(train split\) have "
                                        "the same content"):
        tokenize(cfg, log=lambda *_: None)
    tokens = DataLayout.from_config(cfg).tokens_dir
    assert not tokens.exists() or not list(tokens.glob("*.bin"))  # refused before any work


def test_hub_layer_dedupes_identical_entries(tmp_path):
    files = three_files()
    with ExtraListingHub(files, []) as hub:
        hub.extra = [hub.entry("sample/001.parquet", files["sample/001.parquet"])]  # the same entry twice
        entries = hub_api.list_tree(hub.url, "org/tree", "main", "sample", 10)
    assert sorted(e.path for e in entries) == sorted(files)
