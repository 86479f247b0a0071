"""Loader: windows, a global order independent of world size, exact resume, fixed validation set."""

import numpy as np
import pytest
import torch

from posbench.config_loader import ConfigError
from posbench.data.errors import DataError, ShardError
from posbench.data.loader import ShardBatchSource, ShardSet, TrainLoader, ValidationSet
from posbench.data.sampling import Permutation, window_ids
from posbench.data.shards import HEADER_BYTES, write_shard

FP = "12" * 32
T = 16
LENGTHS = [1000, 20, 700]  # the 20-token shard holds one window of T + 1 = 17 tokens


def arange_shards(folder, lengths=LENGTHS):
    """Shard s holds tokens s*10^5, s*10^5 + 1, ...: every window says where it came from."""
    paths = []
    for s, n in enumerate(lengths):
        paths.append(folder / f"train_{s:05d}.bin")
        write_shard(paths[-1], np.arange(s * 100_000, s * 100_000 + n), vocab_size=10**6, fingerprint=FP)
    return paths


def windows_of(x, y):
    return [(int(row[0]) // 100_000, int(row[0]) % 100_000) for row in torch.cat([x, y[:, -1:]], 1)]


def test_permutation_is_a_bijection_and_depends_on_the_key():
    for n in (1, 2, 3, 7, 64, 1000, 4099):
        assert sorted(Permutation(n, 5)(np.arange(n)).tolist()) == list(range(n))
    a, b = Permutation(1000, 1)(np.arange(1000)), Permutation(1000, 2)(np.arange(1000))
    assert (a != b).mean() > 0.9 and (a != np.arange(1000)).mean() > 0.9


def test_window_ids_are_a_pure_function_of_the_global_index():
    g = np.arange(0, 3000)
    whole = window_ids(g, 1000, seed=3)
    pieces = np.concatenate([window_ids(g[i:i + 7], 1000, seed=3) for i in range(0, 3000, 7)])
    assert (whole == pieces).all()
    for epoch in range(3):  # each epoch is a full permutation, each a different one
        assert sorted(whole[epoch * 1000:(epoch + 1) * 1000]) == list(range(1000))
    assert (whole[:1000] != whole[1000:2000]).mean() > 0.9


def test_windows_are_consecutive_tokens_with_stride_seq_len(tmp_path):
    shards = ShardSet(arange_shards(tmp_path), T, FP)
    assert shards.n_windows == (1000 - 1) // T + 1 + (700 - 1) // T == 62 + 1 + 43
    loader = TrainLoader(shards, global_batch=2, seed=0)
    seen = []
    for _ in range(shards.n_windows // 2):
        x, y = next(loader)
        assert x.shape == y.shape == (2, T) and x.dtype == y.dtype == torch.int64
        assert (y[:, :-1] == x[:, 1:]).all()
        full = torch.cat([x, y[:, -1:]], 1)
        assert (full == full[:, :1] + torch.arange(T + 1)).all()  # T + 1 consecutive tokens of one shard
        seen += windows_of(x, y)
    expected = [(0, k * T) for k in range(62)] + [(1, 0)] + [(2, k * T) for k in range(43)]
    assert sorted(seen) == expected  # one epoch visits every window exactly once


def test_ranks_split_each_global_batch_and_together_equal_one_process(tmp_path):
    shards = ShardSet(arange_shards(tmp_path), T, FP)
    single = TrainLoader(shards, global_batch=8, seed=7)
    ranks = [TrainLoader(shards, global_batch=8, rank=r, world=2, seed=7) for r in range(2)]
    for _ in range(30):  # crosses an epoch boundary (106 windows)
        x, y = next(single)
        parts = [next(r) for r in ranks]
        assert parts[0][0].shape == (4, T)
        assert torch.equal(torch.cat([p[0] for p in parts]), x) and torch.equal(torch.cat([p[1] for p in parts]), y)


def test_resume_from_cursor_reproduces_the_batches(tmp_path):
    shards = ShardSet(arange_shards(tmp_path), T, FP)
    straight = TrainLoader(shards, global_batch=6, seed=1)
    batches = [next(straight) for _ in range(100)]
    first = TrainLoader(shards, global_batch=6, seed=1)
    for _ in range(71):
        next(first)
    state = first.state_dict()
    assert state["sample"] == 71 * 6
    resumed = TrainLoader(ShardSet(arange_shards(tmp_path), T, FP), global_batch=6, seed=1)  # "new process"
    resumed.load_state_dict(state)
    for k in range(71, 100):
        assert torch.equal(next(resumed)[0], batches[k][0])
    # resuming on 3 ranks from a single-process cursor: rank r reads its slice of the same batches
    r1 = TrainLoader(shards, global_batch=6, rank=1, world=3, seed=1)
    r1.load_state_dict(state)
    assert torch.equal(next(r1)[0], batches[71][0][2:4])


def test_cursor_from_other_data_is_refused(tmp_path):
    loader = TrainLoader(ShardSet(arange_shards(tmp_path / "a"), T, FP), global_batch=4)
    (tmp_path / "b").mkdir()
    other = TrainLoader(ShardSet(arange_shards(tmp_path / "b", [1000, 20, 701]), T, FP), global_batch=4)
    with pytest.raises(DataError, match="train shards or seq_len/seed changed"):
        other.load_state_dict(loader.state_dict())


def test_validation_set_is_fixed_and_split_by_rank(tmp_path):
    shards = ShardSet(arange_shards(tmp_path), T, FP)
    val = ValidationSet(shards, max_tokens=40 * T)
    rows = [w for x, y in val.batches(7) for w in windows_of(x, y)]
    assert rows == [(0, k * T) for k in range(40)]  # the first 40 windows, in order
    assert rows == [w for x, y in val.batches(7) for w in windows_of(x, y)]
    parts = [[w for x, y in ValidationSet(shards, 40 * T, r, 3).batches(5) for w in windows_of(x, y)]
             for r in range(3)]
    assert sorted(sum(parts, [])) == sorted(rows) and parts[1][:2] == [(0, T), (0, 4 * T)]


def test_batch_source_matches_the_loader(tmp_path):
    train = ShardSet(arange_shards(tmp_path), T, FP)
    source = ShardBatchSource(train, train, seed=4, val_tokens=10 * T, tokenizer_fingerprint=FP)
    loader = TrainLoader(train, global_batch=8, seed=4)
    for step in range(5):
        assert torch.equal(source.samples(range(step * 8, step * 8 + 8))[0], next(loader)[0])
    assert source.n_val() == 10
    with pytest.raises(IndexError):
        source.val_samples([10])


def test_bad_world_and_bad_shards_fail_clearly(tmp_path):
    paths = arange_shards(tmp_path)
    shards = ShardSet(paths, T, FP)
    with pytest.raises(ConfigError, match="multiple of the world size"):
        TrainLoader(shards, global_batch=6, rank=0, world=4)
    with pytest.raises(ShardError, match="different tokenizer"):
        ShardSet(paths, T, "34" * 32)
    with pytest.raises(DataError, match="not one window"):
        ShardSet(paths[1:2], 64, FP)
    raw = bytearray(paths[0].read_bytes())  # a corrupt token deep inside, under an intact header
    raw[HEADER_BYTES + 4 * 500:HEADER_BYTES + 4 * 501] = np.array([10**6 + 5], "<u4").tobytes()
    paths[0].write_bytes(bytes(raw))
    # refused when the shards are opened, before any batch (issue 13: not hours into a run)
    with pytest.raises(ShardError, match=f"{paths[0]}: token id 1000005 >= vocab size 1000000 at token 500;"):
        ShardSet(paths, T, FP)
    # with the start-up check off, the per-batch check still finds it when its batch is read
    loader = TrainLoader(ShardSet(paths, T, FP, check_tokens=False), global_batch=106)
    loader.shards.check_tokens = True
    with pytest.raises(ShardError, match=f"{paths[0]}: token id 1000005 >= vocab size 1000000"):
        next(loader)
