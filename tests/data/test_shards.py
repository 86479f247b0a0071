"""Token shard format: header layout by hand, dtype switch, and every validation failure naming the file."""

import numpy as np
import pytest

from posbench.data.shards import HEADER_BYTES, ShardHeader, ShardWriter, open_shard, read_header, write_shard
from posbench.errors import ShardError

FP = "ab" * 32  # a tokenizer fingerprint (sha256 hex)
OTHER_FP = "cd" * 32


def test_header_layout_matches_the_documented_format(tmp_path):
    path = tmp_path / "s.bin"
    write_shard(path, np.array([5, 0, 65535, 7], dtype=np.uint32), vocab_size=65536, fingerprint=FP, n_docs=2)
    raw = path.read_bytes()
    assert len(raw) == 1024 + 4 * 2  # uint16 tokens for a vocab of exactly 65536
    h = np.frombuffer(raw[:1024], dtype="<i4")
    assert h[0] == 0x42534F50 and raw[:4] == b"POSB"
    assert list(h[1:6]) == [1, 2, 4, 0, 65536]  # version, dtype bytes, count lo, count hi, vocab
    assert bytes(raw[24:40]) == bytes.fromhex(FP)[:16]
    assert list(h[10:12]) == [2, 0] and not h[12:].any()
    assert np.frombuffer(raw[1024:], dtype="<u2").tolist() == [5, 0, 65535, 7]


def test_vocab_above_65536_switches_to_uint32(tmp_path):
    path = tmp_path / "s.bin"
    write_shard(path, np.array([70000, 1, 65536]), vocab_size=70001, fingerprint=FP)
    assert path.stat().st_size == 1024 + 3 * 4
    header, tokens = open_shard(path, FP)
    assert header.itemsize == 4 and tokens.dtype == np.dtype("<u4")
    assert tokens.tolist() == [70000, 1, 65536]


def test_token_count_is_64_bit():
    h = np.frombuffer(ShardHeader(2**32 + 7, 100, b"\1" * 16, n_docs=2**31 + 1).pack(), dtype="<i4")
    assert (h[3], h[4]) == (7, 1)
    assert (int(np.uint32(h[10].view(np.uint32))), h[11]) == (2**31 + 1, 0)


def test_writer_streams_batches_and_leaves_nothing_on_error(tmp_path):
    path = tmp_path / "s.bin"
    with ShardWriter(path, 300, FP) as w:
        w.write(np.array([1, 2, 3]), 1)
        w.write(np.array([256, 4]), 1)
    header, tokens = open_shard(path, FP)
    assert (header.n_tokens, header.n_docs, tokens.tolist()) == (5, 2, [1, 2, 3, 256, 4])
    with pytest.raises(RuntimeError), ShardWriter(tmp_path / "t.bin", 300, FP) as w:
        w.write(np.array([1, 2]))
        raise RuntimeError("killed mid-way")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.bin"]  # no partial file, no temp file


def good_shard(tmp_path, name="s.bin"):
    path = tmp_path / name
    write_shard(path, np.arange(10), vocab_size=50, fingerprint=FP, n_docs=1)
    return path


def patch_ints(path, **ints):
    raw = bytearray(path.read_bytes())
    for index, value in ints.items():
        raw[int(index[1:]) * 4:int(index[1:]) * 4 + 4] = np.array([value], "<i4").tobytes()
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage, message", [
    ("truncated_header", "truncated"),
    ("wrong_magic", "not a posbench token shard"),
    ("wrong_version", "version 2"),
    ("count_mismatch", "header says 11 tokens"),
    ("cut_tokens", "header says 10 tokens"),
    ("appended", "header says 10 tokens"),
    ("bad_dtype", "dtype code 4"),
    ("token_out_of_vocab", "token id 50 at position 3"),
    ("fingerprint", "different tokenizer"),
])
def test_reader_rejects_damage_and_names_the_file(tmp_path, damage, message):
    path = good_shard(tmp_path)
    raw = path.read_bytes()
    if damage == "truncated_header":
        path.write_bytes(raw[:500])
    elif damage == "wrong_magic":
        patch_ints(path, i0=0x12345678)
    elif damage == "wrong_version":
        patch_ints(path, i1=2)
    elif damage == "count_mismatch":
        patch_ints(path, i3=11)
    elif damage == "cut_tokens":
        path.write_bytes(raw[:-2])
    elif damage == "appended":
        path.write_bytes(raw + b"\0\0")
    elif damage == "bad_dtype":
        patch_ints(path, i2=4)
    elif damage == "token_out_of_vocab":
        path.write_bytes(raw[:HEADER_BYTES + 6] + np.array([50], "<u2").tobytes() + raw[HEADER_BYTES + 8:])
    with pytest.raises(ShardError, match=message) as err:
        open_shard(path, OTHER_FP if damage == "fingerprint" else FP)
    assert str(path) in str(err.value)


def test_header_only_read_skips_the_token_scan_but_checks_size(tmp_path):
    path = good_shard(tmp_path)
    assert read_header(path).n_tokens == 10
    with pytest.raises(ShardError, match="does not exist"):
        read_header(tmp_path / "missing.bin")


def test_writer_refuses_ids_outside_the_vocab(tmp_path):
    with pytest.raises(ShardError, match="refusing to write token id 50"):
        write_shard(tmp_path / "s.bin", np.array([1, 50]), vocab_size=50, fingerprint=FP)
    assert not list(tmp_path.iterdir())
