"""Tokenize with bounded memory, no temp file left after a failure, and no worker outliving its parent.

Before: a 1,241-byte parquet whose text expands to 1 GB aborted with a Rust OOM (exit 134, 4 GB RSS in 3 s) and
left a `.tmp`; killing the parent with 2 workers left both workers and the resource tracker running.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_helpers import data_config, fake_docs, parquet_bytes

import posbench
from posbench.data.info import describe
from posbench.data.layout import DataLayout
from posbench.data.readers import BATCH_BYTES, reader_for
from posbench.data.shards import read_header
from posbench.data.tokenize_shards import tokenize
from posbench.errors import DataError
from tests.core.test_procpool import alive, children_of

SRC = Path(posbench.__file__).resolve().parents[1]  # the code under test, for subprocesses


def bomb(path: Path, rows: int, value_bytes: int) -> Path:
    """A parquet file of `rows` documents that are all one `value_bytes`-long string: dictionary-encoded and
    compressed, a few KB on disk, rows * value_bytes of text once decoded. The schema says plain string (no
    stored Arrow schema), as any writer's would."""
    value = ("posbench " * (value_bytes // 9 + 1))[:value_bytes]
    column = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype=np.int32)), pa.array([value]))
    pq.write_table(pa.table({"text": column}), path, store_schema=False, compression="zstd")
    return path


READ_ALL = textwrap.dedent("""
    import json, sys
    from posbench.data.readers import reader_for
    reader = reader_for(sys.argv[1], "text", 1024, int(sys.argv[2]))
    chars = docs = longest = biggest = 0
    for batch in reader.batches():
        docs += len(batch)
        chars += sum(map(len, batch))
        longest = max(longest, max(map(len, batch)))
        biggest = max(biggest, sum(map(len, batch)))
    # VmHWM: this program's peak RSS (ru_maxrss would include the forking pytest's, kept across exec)
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(json.dumps({"rss_mb": int(hwm.split()[1]) / 1024, "chars": chars,
                      "docs": docs, "longest": longest, "biggest": biggest, "split": reader.split_docs}))
""")


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads the peak RSS from /proc")
def test_a_small_file_that_decodes_to_512_mb_is_read_in_bounded_memory(tmp_path):
    path = bomb(tmp_path / "bomb.parquet", 512, 1 << 20)
    assert path.stat().st_size < 64 << 10
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run([sys.executable, "-c", READ_ALL, str(path), "100000"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["chars"] == 512 << 20 and got["split"] == 512 and got["docs"] == 512 * 11  # 11 pieces of <= 100,000
    assert got["longest"] <= 100_000 and got["biggest"] <= BATCH_BYTES + 100_000
    assert got["rss_mb"] < 400, got  # the text alone is 512 MB; pyarrow's whole-column read made it 1.5 GB+


def test_long_documents_are_split_and_info_says_so(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(2):
        (corpus / f"part_{i}.parquet").write_bytes(parquet_bytes(fake_docs(10, 70 + i)))
    bomb(corpus / "part_2.parquet", 64, 250_000)
    cfg = data_config(tmp_path / "data", "data.source={name: local, paths: ['" + str(corpus) + "/*']}",
                      "data.tokenize.max_doc_chars=100000", num_shards=None)
    report = tokenize(cfg, log=lambda *_: None)
    assert report.split_documents == 64
    header = read_header(DataLayout.from_config(cfg).tokens_dir / "train_00002.bin")
    assert header.n_docs == 64 * 3 and header.n_tokens == 64 * 250_000 + 64 * 3  # bytes: a token a byte, + BOS
    assert "train  1 shards" in describe(cfg) and \
        "64 documents longer than data.tokenize.max_doc_chars=100,000 split into pieces" in describe(cfg)


def test_a_row_group_decompressing_past_the_cap_is_refused_before_any_work(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(2):
        (corpus / f"part_{i}.parquet").write_bytes(parquet_bytes(fake_docs(10, 80 + i)))
    pq.write_table(pa.table({"text": ["x" * (3 << 20)]}), corpus / "part_2.parquet", compression="zstd")
    assert (corpus / "part_2.parquet").stat().st_size < 16 << 10
    cfg = data_config(tmp_path / "data", "data.source={name: local, paths: ['" + str(corpus) + "/*']}",
                      f"data.tokenize.max_row_group_bytes={1 << 20}", num_shards=None)
    with pytest.raises(DataError, match=r"part_2.parquet: row group 0 of column `text` decompresses to 3,14\d,\d{3} "
                                        r"bytes .* over data.tokenize.max_row_group_bytes=1,048,576"):
        tokenize(cfg, log=lambda *_: None)
    assert not DataLayout.from_config(cfg).tokens_dir.exists()
    with pytest.raises(DataError, match="row group 0"):
        reader_for(corpus / "part_2.parquet", max_row_group_bytes=1 << 20).check()


# Loaded by every Python process of the command (PYTHONPATH), so the spawned workers too: a worker dies (SIGKILL,
# like the kernel's OOM killer) or hangs in the middle of writing its shard.
SITECUSTOMIZE = textwrap.dedent("""
    import multiprocessing, os, signal, time
    MODE = os.environ.get("POSBENCH_TEST_WORKER")
    if MODE:
        from posbench.data import shards
        original = shards.ShardWriter.write

        def write(self, tokens, n_docs=0):
            original(self, tokens, n_docs)
            if multiprocessing.parent_process() is not None:  # in a worker, not in the command itself
                self._f.flush()
                if MODE == "die":
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(300)

        shards.ShardWriter.write = write
""")


def tokenize_command(tmp_path, mode: str) -> tuple[subprocess.Popen, Path]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(4):  # val, filler, two train files: two workers
        (corpus / f"part_{i}.parquet").write_bytes(parquet_bytes(fake_docs(40, 90 + i)))
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {**os.environ, "PYTHONPATH": f"{site}:{SRC}", "POSBENCH_TEST_WORKER": mode,
           "OMP_NUM_THREADS": "1"}
    args = [f"data.root={tmp_path / 'data'}", "data.source={name: local, paths: ['" + str(corpus) + "/*']}",
            "data.tokenizer.name=bytes", "data.mix.tasks=[]", "data.tokenize.batch_rows=8", "--workers", "2"]
    proc = subprocess.Popen([sys.executable, "-m", "posbench", "data", "tokenize", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cfg = data_config(tmp_path / "data", "data.source={name: local, paths: ['" + str(corpus) + "/*']}",
                      num_shards=None)
    return proc, DataLayout.from_config(cfg).tokens_dir


def test_a_worker_dying_mid_shard_leaves_no_temp_file(tmp_path):
    proc, tokens = tokenize_command(tmp_path, "die")
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 2 and "a tokenizer worker process died" in err, err
    assert tokens.is_dir() and not list(tokens.glob(".*.tmp"))


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table from /proc")
def test_killing_the_parent_ends_its_workers_and_the_resource_tracker(tmp_path):
    proc, tokens = tokenize_command(tmp_path, "hang")
    children = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(list(tokens.glob(".*.tmp"))) < 2:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        children = children_of(proc.pid)
        cmdlines = [Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace") for p in children]
        assert sum("spawn_main" in c and "resource_tracker" not in c for c in cmdlines) == 2, cmdlines
        assert sum("resource_tracker" in c for c in cmdlines) == 1, cmdlines
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 15 and any(alive(p) for p in children):
            time.sleep(0.1)
        assert not any(alive(p) for p in children), "workers or the resource tracker outlived their killed parent"
    finally:
        proc.kill()
        for p in children:
            if alive(p):
                os.kill(p, signal.SIGKILL)
