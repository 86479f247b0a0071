"""End to end, as a new user runs it: download -> tokenize -> info against the loopback hub."""

import os
import subprocess
import sys

from data_helpers import FakeHub, shard_files

from posbench.data.shards import open_shard


def cli(cwd, endpoint, *args):
    env = {**os.environ, "HF_ENDPOINT": endpoint}
    env.pop("HF_TOKEN", None)
    return subprocess.run([sys.executable, "-m", "posbench.data.prepare_fineweb", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_download_tokenize_info_end_to_end(tmp_path):
    with FakeHub(shard_files(6, docs_per_file=60)) as hub:
        hub.faults["shard_00003.parquet"] = ["503", "drop:2000"]
        small_bpe = "data.tokenizer.vocab_size=300"
        r = cli(tmp_path, hub.url, "download", "--max-shards", "2", small_bpe)
        assert r.returncode == 0, r.stderr
        assert "download: 4 files fetched" in r.stdout  # val 0, filler 1, train 2 and 3
        raw = tmp_path / "data" / "raw" / "karpathy__fineweb-edu-100b-shuffle"
        assert sorted(p.name for p in raw.glob("*.parquet")) == [f"shard_{i:05d}.parquet" for i in range(4)]

        r = cli(tmp_path, hub.url, "download", "--max-shards", "2", small_bpe)
        assert r.returncode == 0 and "0 files fetched" in r.stdout and "4 already verified" in r.stdout

        r = cli(tmp_path, hub.url, "tokenize", small_bpe)
        assert r.returncode == 0, r.stderr
        assert "trained BPE vocab 300" in r.stdout and "tokens/s" in r.stdout
        # the default data config mixes tasks into the train shards: their directory names the mix
        (tokens,) = (tmp_path / "data" / "tokens" / "karpathy__fineweb-edu-100b-shuffle").glob("bpe300_mix-*")
        names = sorted(p.name for p in tokens.glob("*.bin"))
        assert names == ["filler_00001.bin", "train_00002.bin", "train_00003.bin", "val_00000.bin"]
        header, ids = open_shard(tokens / "val_00000.bin")
        assert header.vocab_size == 300 and header.n_docs == 60 and int(ids[0]) == 299  # starts with <|bos|>
        assert open_shard(tokens / "train_00002.bin")[0].n_docs > 60  # 60 corpus documents + task documents

        r = cli(tmp_path, hub.url, "info", "--verify", small_bpe)
        assert r.returncode == 0, r.stderr
        assert "train 2 files" in r.stdout and "tokenized   train  2 shards" in r.stdout
        assert "tokenized   val    1 shards" in r.stdout and "BAD" not in r.stdout
        assert "recounted from the shards (--verify)" in r.stdout and "tasks (all)" in r.stdout

        r = cli(tmp_path, hub.url, "tokenize", small_bpe, "data.splits.filler={start: 1, stop: 3}")
        assert r.returncode == 2 and "error:" in r.stderr and "overlap" in r.stderr
        r = cli(tmp_path, hub.url, "tokenize", "data.tokenizer.vocab_size=5000")
        assert r.returncode == 2 and "only supports" in r.stderr  # corpus too small for that vocab
