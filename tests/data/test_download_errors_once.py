"""`posbench data download` prints each failure once: the first is the command's one `error:` line, later
ones (several files failing) are listed as they happen, never the same text twice."""

import os
import subprocess
import sys

from data_helpers import FakeHub, shard_files


def download(cwd, endpoint):
    env = {**os.environ, "HF_ENDPOINT": endpoint, "POSBENCH_DEBUG": "0"}
    env.pop("HF_TOKEN", None)
    return subprocess.run([sys.executable, "-m", "posbench", "data", "download", "data.download.backoff_s=0.01",
                           "data.download.max_backoff_s=0.05", "data.download.workers=1", "data.source.num_shards=3",
                           "data.tokenizer.name=bytes"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_one_failing_file_is_reported_once(tmp_path):
    with FakeHub(shard_files(3)) as hub:
        hub.faults["shard_00001.parquet"] = ["corrupt"] * 10
        r = download(tmp_path, hub.url)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert out.count("shard_00001.parquet: sha256") == 1, out
    assert r.stderr.strip().splitlines()[-1].startswith("error: 1 of 3 files failed"), r.stderr


def test_several_failing_files_are_each_reported_once(tmp_path):
    with FakeHub(shard_files(3)) as hub:
        for name in ("shard_00000.parquet", "shard_00002.parquet"):
            hub.faults[name] = ["corrupt"] * 10
        r = download(tmp_path, hub.url)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    for name in ("shard_00000.parquet", "shard_00002.parquet"):
        assert out.count(f"{name}: sha256") == 1, out
    assert "error: 2 of 3 files failed" in r.stderr and "the later failures are listed above" in r.stderr


def test_data_help_states_the_exit_codes_it_uses():
    r = subprocess.run([sys.executable, "-m", "posbench", "data", "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "1 data error" not in r.stdout
    assert "Exit codes: 0 ok, 2 bad input" in r.stdout and "5 disk full" in r.stdout
