"""Shards that carry the data's own position ids (version 2) beside old token-only shards (version 1): the header
says what a shard holds and round-trips, an old-format shard written here byte by byte loads unchanged, windows
hand out the ids aligned with their tokens, and damaged or mixed shards are refused with what to do."""

import numpy as np
import pytest

from posbench.data.loader import ShardBatchSource, ShardSet
from posbench.data.shards import HEADER_BYTES, open_positions, open_shard, read_header, write_shard
from posbench.errors import ShardError
from posbench.targets import positions_of

FP = "ab" * 32
T = 8


def old_format_shard(path, tokens, vocab_size, n_docs):
    """A version 1 shard as the format's docstring defines it, built without the writer: 256 int32 (magic,
    version 1, 2 bytes per token, count, vocab, fingerprint, documents, zeros), then uint16 tokens."""
    h = np.zeros(256, dtype="<i4")
    h[0], h[1], h[2], h[3], h[4], h[5] = 0x42534F50, 1, 2, len(tokens), 0, vocab_size
    h[6:10] = np.frombuffer(bytes.fromhex(FP)[:16], dtype="<i4")
    h[10] = n_docs
    path.write_bytes(h.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())
    return path


def test_an_old_format_shard_loads_unchanged_and_has_no_ids(tmp_path):
    tokens = np.arange(100) % 50
    path = old_format_shard(tmp_path / "old.bin", tokens, 50, 3)
    header, got = open_shard(path, FP)
    assert (header.n_tokens, header.vocab_size, header.n_docs, header.positions, header.version) == (100, 50, 3,
                                                                                                     False, 1)
    assert got.tolist() == tokens.tolist() and open_positions(path, header) is None
    # the writer still makes exactly this file for a token-only shard
    write_shard(tmp_path / "new.bin", tokens, 50, FP, n_docs=3)
    assert (tmp_path / "new.bin").read_bytes() == path.read_bytes()
    source = ShardBatchSource(ShardSet([path], T, FP), ShardSet([path], T, FP))
    assert positions_of(source.samples([0, 1])) is None


def test_a_shard_with_ids_says_so_and_round_trips(tmp_path):
    tokens, ids = np.arange(40) % 30, (np.arange(40) * 7) % 1000
    header = write_shard(tmp_path / "pos.bin", tokens, 30, FP, n_docs=2, positions=ids)
    assert header.positions and header.version == 2 and header.n_tokens == 40
    raw = np.frombuffer((tmp_path / "pos.bin").read_bytes()[:HEADER_BYTES], dtype="<i4")
    assert (raw[1], raw[12]) == (2, 1)  # version 2, contents bit 0: position ids follow the tokens
    assert (tmp_path / "pos.bin").stat().st_size == HEADER_BYTES + 40 * 2 + 40 * 4
    assert read_header(tmp_path / "pos.bin") == header
    h, got = open_shard(tmp_path / "pos.bin", FP)
    assert got.tolist() == tokens.tolist() and open_positions(tmp_path / "pos.bin", h).tolist() == ids.tolist()


def test_windows_hand_out_the_ids_of_their_input_tokens(tmp_path):
    tokens = np.arange(50)
    ids = 1000 + np.arange(50)  # id = 1000 + token: every id says which token it belongs to
    path = tmp_path / "pos.bin"
    write_shard(path, tokens, 64, FP, positions=ids)
    source = ShardBatchSource(ShardSet([path], T, FP), ShardSet([path], T, FP))
    for rows in (source.samples([0, 3, 5]), source.val_samples([0, 1])):
        x, y = rows
        assert rows.positions.shape == x.shape
        assert (rows.positions == x + 1000).all()


def test_damaged_or_mixed_shards_are_refused(tmp_path):
    write_shard(tmp_path / "pos.bin", np.arange(40), 64, FP, positions=np.arange(40))
    data = (tmp_path / "pos.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[:-4])
    with pytest.raises(ShardError, match="with position ids .*truncated or appended to"):
        read_header(tmp_path / "cut.bin")
    h = np.frombuffer(data[:HEADER_BYTES], dtype="<i4").copy()
    h[12] = 0
    (tmp_path / "flag.bin").write_bytes(h.tobytes() + data[HEADER_BYTES:])
    with pytest.raises(ShardError, match="contents field 0 .expected 1.; the header is corrupt"):
        read_header(tmp_path / "flag.bin")
    old = old_format_shard(tmp_path / "old.bin", np.arange(40), 64, 0)
    with pytest.raises(ShardError, match="1 of 2 carry position ids .e.g. pos.bin.; re-tokenize them all"):
        ShardSet([tmp_path / "pos.bin", old], T, FP)
    with pytest.raises(ShardError, match="position ids must be >= 0, one per token"):
        write_shard(tmp_path / "bad.bin", np.arange(4), 64, FP, positions=np.arange(3))
    assert not (tmp_path / "bad.bin").exists()


def test_rows_unpack_as_the_pair_and_keep_their_ids_through_pickle_and_copy():
    import copy
    import pickle

    import torch

    from posbench.targets import Rows

    rows = Rows(torch.zeros(2, 3), torch.ones(2, 3), torch.arange(6).view(2, 3))
    x, y = rows
    assert x.shape == y.shape == (2, 3) and len(rows) == 2
    for again in (pickle.loads(pickle.dumps(rows)), copy.deepcopy(rows)):
        assert isinstance(again, Rows) and torch.equal(positions_of(again), rows.positions)
    assert positions_of((x, y)) is None and positions_of(Rows(x, y)) is None


def test_a_negative_position_id_deep_in_a_shard_is_refused_when_opened(tmp_path):
    """The writer refuses negative ids; one planted in a written file (bit rot, another tool) is found when the shard
    is opened, naming the token, not when a batch reaches it mid-training (an IndexError on every resume)."""
    n = 1000
    path = tmp_path / "ids.bin"
    write_shard(path, np.arange(n) % 50, 50, FP, positions=np.arange(n) % 7)
    raw = bytearray(path.read_bytes())
    offset = HEADER_BYTES + n * 2 + 4 * 987  # uint16 tokens, then int32 ids: id of token 987
    raw[offset:offset + 4] = np.array([-1], dtype="<i4").tobytes()
    path.write_bytes(bytes(raw))
    header, _ = open_shard(path, FP)
    with pytest.raises(ShardError, match=r"ids\.bin: position id -1 at token 987 is negative"):
        open_positions(path, header)
    with pytest.raises(ShardError, match="position id -1 at token 987"):
        ShardSet([path], T, FP)
