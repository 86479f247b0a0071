"""Loader: windows, a global order independent of world size, exact resume, fixed validation set."""

import numpy as np
import pytest
import torch

from posbench.data.loader import ShardBatchSource, ShardSet
from posbench.data.sampling import Permutation, window_ids
from posbench.data.shards import HEADER_BYTES, write_shard
from posbench.errors import ConfigError, DataError, ShardError
from posbench.training.batch_sources import micro_indices, val_indices

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


def source_over(shards, seed=0, val=None, val_tokens=10 * T):
    return ShardBatchSource(shards, val or shards, seed=seed, val_tokens=val_tokens, tokenizer_fingerprint=FP)


def step_batch(source, step, global_batch, rank=0, world=1):
    """Rank `rank`'s rows of global batch `step`, addressed as the training loop addresses them."""
    return source.samples(micro_indices(step, 0, global_batch // world, 1, rank, world))


def test_windows_are_consecutive_tokens_with_stride_seq_len(tmp_path):
    shards = ShardSet(arange_shards(tmp_path), T, FP)
    assert shards.n_windows == (1000 - 1) // T + 1 + (700 - 1) // T == 62 + 1 + 43
    source = source_over(shards)
    seen = []
    for step in range(shards.n_windows // 2):
        x, y = step_batch(source, step, 2)
        assert x.shape == y.shape == (2, T) and x.dtype == y.dtype == torch.int64
        assert (y[:, :-1] == x[:, 1:]).all()
        full = torch.cat([x, y[:, -1:]], 1)
        assert (full == full[:, :1] + torch.arange(T + 1)).all()  # T + 1 consecutive tokens of one shard
        seen += windows_of(x, y)
    expected = [(0, k * T) for k in range(62)] + [(1, 0)] + [(2, k * T) for k in range(43)]
    assert sorted(seen) == expected  # one epoch visits every window exactly once


def test_ranks_split_each_global_batch_and_together_equal_one_process(tmp_path):
    source = source_over(ShardSet(arange_shards(tmp_path), T, FP), seed=7)
    for step in range(30):  # crosses an epoch boundary (106 windows)
        x, y = step_batch(source, step, 8)
        parts = [step_batch(source, step, 8, r, 2) for r in range(2)]
        assert parts[0][0].shape == (4, T)
        assert torch.equal(torch.cat([p[0] for p in parts]), x) and torch.equal(torch.cat([p[1] for p in parts]), y)


def test_resume_at_a_step_reproduces_the_batches(tmp_path):
    """The data cursor is the step: a new process (new ShardSet) at step k reads batch k."""
    straight = source_over(ShardSet(arange_shards(tmp_path), T, FP), seed=1)
    batches = [step_batch(straight, k, 6) for k in range(100)]
    resumed = source_over(ShardSet(arange_shards(tmp_path), T, FP), seed=1)  # "new process"
    for k in range(71, 100):
        assert torch.equal(step_batch(resumed, k, 6)[0], batches[k][0])
    # resuming on 3 ranks after a single-process run: rank r reads its slice of the same batches
    assert torch.equal(step_batch(resumed, 71, 6, 1, 3)[0], batches[71][0][2:4])


def test_other_data_has_another_fingerprint_and_resume_refuses_it(tmp_path):
    from posbench.config import load_config
    from posbench.training.checkpoint import Loaded
    from posbench.training.resume import check_resume_compatible
    from posbench.training.rundir import identity

    ours = source_over(ShardSet(arange_shards(tmp_path / "a"), T, FP))
    (tmp_path / "b").mkdir()
    other = source_over(ShardSet(arange_shards(tmp_path / "b", [1000, 20, 701]), T, FP))
    assert ours.fingerprint != other.fingerprint
    assert ours.fingerprint != source_over(ShardSet(arange_shards(tmp_path / "a"), T, FP), seed=1).fingerprint
    cfg = load_config()
    saved = Loaded(tmp_path / "step_00000001", {}, {}, {"identity": identity(cfg, ours.fingerprint)}, None)
    check_resume_compatible(cfg, saved, identity(cfg, ours.fingerprint))
    with pytest.raises(ConfigError, match="data .* differ from this run's"):
        check_resume_compatible(cfg, saved, identity(cfg, other.fingerprint))


def test_validation_set_is_fixed_and_split_by_rank(tmp_path):
    source = source_over(ShardSet(arange_shards(tmp_path), T, FP), val_tokens=40 * T)
    assert source.n_val() == 40

    def rows(rank, world, micro_batch):
        n = source.n_val()
        batches = -(-n // (micro_batch * world))
        return [w for b in range(batches) for w in windows_of(*source.val_samples(
            [i for i in val_indices(b, micro_batch, rank, world, n)]))]

    assert rows(0, 1, 5) == [(0, k * T) for k in range(40)]  # the first 40 windows, in order
    assert rows(0, 1, 5) == rows(0, 1, 5)
    parts = [rows(r, 2, 5) for r in range(2)]  # each rank its share of the same rows
    assert sorted(parts[0] + parts[1]) == sorted(rows(0, 1, 5)) and parts[1][:2] == [(0, 5 * T), (0, 6 * T)]


def test_batch_source_reads_the_permuted_windows(tmp_path):
    train = ShardSet(arange_shards(tmp_path), T, FP)
    source = source_over(train, seed=4)
    for step in range(5):
        ids = window_ids(np.arange(step * 8, step * 8 + 8), train.n_windows, seed=4)
        x, y = train.gather(ids)[:, :-1], train.gather(ids)[:, 1:]
        assert torch.equal(source.samples(range(step * 8, step * 8 + 8))[0], torch.as_tensor(x))
        assert torch.equal(source.samples(range(step * 8, step * 8 + 8))[1], torch.as_tensor(y))
    assert source.n_val() == 10
    with pytest.raises(IndexError):
        source.val_samples([10])


def test_bad_shards_fail_clearly(tmp_path):
    paths = arange_shards(tmp_path)
    with pytest.raises(ShardError, match="different tokenizer"):
        ShardSet(paths, T, "34" * 32)
    with pytest.raises(DataError, match="not one window"):
        ShardSet(paths[1:2], 64, FP)
    raw = bytearray(paths[0].read_bytes())  # a corrupt token deep inside, under an intact header
    raw[HEADER_BYTES + 4 * 500:HEADER_BYTES + 4 * 501] = np.array([10**6 + 5], "<u4").tobytes()
    paths[0].write_bytes(bytes(raw))
    # refused when the shards are opened, before any batch (not hours into a run)
    with pytest.raises(ShardError, match=f"{paths[0]}: token id 1000005 >= vocab size 1000000 at token 500;"):
        ShardSet(paths, T, FP)
    # with the start-up check off, the per-batch check still finds it when its batch is read
    shards = ShardSet(paths, T, FP, check_tokens=False)
    source = source_over(shards)
    shards.check_tokens = True
    with pytest.raises(ShardError, match=f"{paths[0]}: token id 1000005 >= vocab size 1000000"):
        source.samples(range(106))


def test_a_global_batch_that_does_not_split_over_the_world_is_refused():
    """Each rank reads global_batch / world rows of a step (micro_indices); the plan refuses a remainder."""
    from posbench.config import load_config
    from posbench.training.plan import make_plan

    cfg = load_config(overrides=["model.seq_len=16", "train.micro_batch=1", "train.global_batch_tokens=96"])
    assert make_plan(cfg, 2, "cpu").accum == 3  # 6 sequences a step: 3 per rank
    with pytest.raises(ConfigError, match="world size = 1 x 16 x 4"):
        make_plan(cfg, 4, "cpu")
