"""Tokenizing files into shards: exact tokens, determinism, idempotence, resume after SIGKILL."""

import json
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_helpers import data_config, fake_docs, parquet_bytes

from posbench.data.layout import DataLayout
from posbench.data.shards import open_shard
from posbench.data.tokenize_shards import tokenize
from posbench.errors import DataError

BOS = 256  # the bytes tokenizer: token = UTF-8 byte, <|bos|> = 256


def expected_tokens(docs):
    """Independent reference: <|bos|> then the UTF-8 bytes, per non-empty document."""
    out = []
    for d in docs:
        if d:
            out += [BOS, *d.encode("utf-8")]
    return out


def make_local_corpus(folder, n_parquet=5, docs_per_file=40):
    folder.mkdir(parents=True, exist_ok=True)
    docs = {}
    for i in range(n_parquet):
        d = fake_docs(docs_per_file, 100 + i)
        (folder / f"part_{i}.parquet").write_bytes(parquet_bytes(d, row_group_size=7))
        docs[f"part_{i}.parquet"] = d
    return docs


def local_config(root, corpus, *extra):
    return data_config(root, "data.source={name: local, paths: ['" + str(corpus) + "/*']}", *extra, num_shards=None)


def shard_bytes(cfg):
    folder = DataLayout.from_config(cfg).tokens_dir
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.bin"))}


def test_parquet_jsonl_and_txt_give_exactly_bos_plus_tokens(tmp_path):
    corpus = tmp_path / "corpus"
    docs = make_local_corpus(corpus, n_parquet=2)
    jsonl = ["first line doc", "", None, "✓ unicode \"quoted\"\nnew line"]
    (corpus / "c.jsonl").write_text("\n".join(json.dumps({"text": t, "id": i}) for i, t in enumerate(jsonl))
                                    + "\n\n")
    (corpus / "d.txt").write_text("A whole file is one document.\n\nEven with blank lines.\n")
    cfg = local_config(tmp_path / "data", corpus, "data.splits.train={start: 2, stop: null}")
    logs = []
    report = tokenize(cfg, log=logs.append)
    assert (report.done, report.documents) == (4, 40 + 40 + 2 + 1) and "tokens/s" in logs[-1]
    out = DataLayout.from_config(cfg).tokens_dir
    # sorted inputs: c.jsonl (0: val), d.txt (1: filler), part_0 (2: train), part_1 (3: train)
    want = {"val_00000.bin": expected_tokens(jsonl), "filler_00001.bin": expected_tokens(
        [(corpus / "d.txt").read_text()]), "train_00002.bin": expected_tokens(docs["part_0.parquet"]),
        "train_00003.bin": expected_tokens(docs["part_1.parquet"])}
    for name, tokens in want.items():
        header, got = open_shard(out / name)
        assert got.tolist() == tokens, name
        assert header.n_docs == tokens.count(BOS) and header.itemsize == 2


def test_tokenizing_twice_is_idempotent_and_worker_count_does_not_matter(tmp_path):
    corpus = tmp_path / "corpus"
    make_local_corpus(corpus)
    cfg = local_config(tmp_path / "a", corpus)
    tokenize(cfg, log=lambda *_: None)
    first = shard_bytes(cfg)
    mtimes = {p: p.stat().st_mtime_ns for p in DataLayout.from_config(cfg).tokens_dir.glob("*.bin")}
    again = tokenize(cfg, log=lambda *_: None)
    assert (again.done, again.skipped) == (0, 5)
    assert shard_bytes(cfg) == first
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes  # not even rewritten
    cfg2 = local_config(tmp_path / "b", corpus, "data.tokenize.batch_rows=3")
    tokenize(cfg2, workers=2, log=lambda *_: None)  # spawned worker processes, other batch size
    assert shard_bytes(cfg2) == first and len(first) == 5


KILLER = textwrap.dedent("""
    import os, signal, sys
    from posbench.config import load_config
    from posbench.data import shards
    from posbench.data.tokenize_shards import tokenize

    calls = 0
    original = shards.ShardWriter.write

    def write(self, tokens, n_docs=0):
        global calls
        original(self, tokens, n_docs)
        calls += 1
        if calls == int(sys.argv[1]):  # die mid-file, like a kill -9 or an OOM kill
            self._f.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    shards.ShardWriter.write = write
    tokenize(load_config(overrides=sys.argv[2:]).data, workers=1)
""")


def test_sigkill_mid_way_then_rerun_equals_a_clean_run(tmp_path):
    corpus = tmp_path / "corpus"
    make_local_corpus(corpus)  # 5 files x 40 docs, 8 docs per batch -> 5 writes per file
    clean = local_config(tmp_path / "clean", corpus)
    tokenize(clean, log=lambda *_: None)
    killed = local_config(tmp_path / "killed", corpus)
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    overrides = [f"data.root={tmp_path / 'killed'}", "data.mix.tasks=[]", "data.tokenizer.name=bytes",
                 "data.tokenize.batch_rows=8",
                 f"data.source={{name: local, paths: ['{corpus}/*']}}"]
    proc = subprocess.run([sys.executable, str(script), "13", *overrides], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    out = DataLayout.from_config(killed).tokens_dir
    manifest = json.loads((out / "manifest.json").read_text())["files"]
    assert sorted(manifest) == ["filler_00001.bin", "val_00000.bin"]  # files 0 and 1 finished
    assert sorted(p.name for p in out.glob("*.bin")) == ["filler_00001.bin", "val_00000.bin"]
    assert len(list(out.glob(".train_00002.bin.*.tmp"))) == 1  # the torn file is hidden, not a shard
    report = tokenize(killed, log=lambda *_: None)
    assert (report.done, report.skipped) == (3, 2)
    assert shard_bytes(killed) == shard_bytes(clean)
    assert not list(out.glob(".*.tmp"))


def test_bad_input_fails_before_any_shard_is_written(tmp_path):
    corpus = tmp_path / "corpus"
    make_local_corpus(corpus, n_parquet=3)
    pq.write_table(pa.table({"content": ["no text column"]}), corpus / "part_9.parquet")
    cfg = local_config(tmp_path / "data", corpus)
    with pytest.raises(DataError, match=r"part_9.parquet: no column `text` \(columns: content\)"):
        tokenize(cfg, log=lambda *_: None)
    assert not DataLayout.from_config(cfg).tokens_dir.exists()
    (corpus / "part_9.parquet").unlink()
    (corpus / "x.jsonl").write_text('{"body": 1}\n')
    with pytest.raises(DataError, match=r"x.jsonl:1: expected an object with a string `text`"):
        tokenize(cfg, log=lambda *_: None)
    (corpus / "x.jsonl").unlink()
    (corpus / "y.csv").write_text("a,b\n")
    with pytest.raises(DataError, match=r"y.csv: cannot read `.csv` files"):
        tokenize(cfg, log=lambda *_: None)


def test_nothing_downloaded_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="no train or val files.*download"):
        tokenize(data_config(tmp_path), log=lambda *_: None)


def test_changed_split_ranges_remove_stale_shards(tmp_path):
    corpus = tmp_path / "corpus"
    make_local_corpus(corpus, n_parquet=4)
    tokenize(local_config(tmp_path / "data", corpus), log=lambda *_: None)
    cfg = local_config(tmp_path / "data", corpus, "data.splits.val={start: 0, stop: 2}",
                       "data.splits.filler={start: 2, stop: 2}")
    report = tokenize(cfg, log=lambda *_: None)
    assert (report.removed, report.done) == (1, 1)
    assert sorted(shard_bytes(cfg)) == ["train_00002.bin", "train_00003.bin", "val_00000.bin", "val_00001.bin"]


def test_vocab_above_65536_writes_uint32_shards(tmp_path, monkeypatch):
    import tiktoken

    ranks = {bytes([b]): b for b in range(256)}
    ranks.update({f"<{i}>".encode(): 256 + i for i in range(70000 - 256)})
    fake = tiktoken.Encoding("big", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={})
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: fake)
    corpus = tmp_path / "corpus"
    make_local_corpus(corpus, n_parquet=3, docs_per_file=3)
    cfg = local_config(tmp_path / "data", corpus, "data.tokenizer.name=o200k_base")
    tokenize(cfg, log=lambda *_: None)
    header, tokens = open_shard(DataLayout.from_config(cfg).tokens_dir / "val_00000.bin")
    assert (header.itemsize, header.vocab_size, int(tokens[0])) == (4, 70001, 70000)
    assert os.path.getsize(DataLayout.from_config(cfg).tokens_dir / "val_00000.bin") == 1024 + 4 * len(tokens)


def test_a_manifest_naming_a_file_outside_its_folder_is_refused(tmp_path):
    """Paths from a manifest stay inside the data root: a tokens manifest edited (or received) to list
    `../../outside.bin`, a valid shard outside the tokens folder, is refused when loaded, naming the manifest;
    nothing outside is read."""
    from posbench.data.loader import build_batch_source

    cfg = local_config(tmp_path / "root", tmp_path / "corpus")
    make_local_corpus(tmp_path / "corpus")
    tokenize(cfg, log=lambda *_: None)
    layout = DataLayout.from_config(cfg)
    manifest = json.loads(layout.tokens_manifest.read_text())
    name = sorted(n for n in manifest["files"] if n.startswith("train_"))[0]
    outside = tmp_path / "outside.bin"
    os.replace(layout.tokens_dir / name, outside)
    escaped = os.path.relpath(outside, layout.tokens_dir)
    assert escaped.startswith("..") and (layout.tokens_dir / escaped).resolve() == outside.resolve()
    manifest["files"][escaped] = manifest["files"].pop(name)
    layout.tokens_manifest.write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=rf"{layout.tokens_manifest} \(a manifest key\): refusing path '\.\./"):
        build_batch_source(cfg, 64)
