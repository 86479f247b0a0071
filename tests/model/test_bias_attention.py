"""The sdpa_bias kernel (model/bias_attention.py) against the eager reference, for every PE with a logit bias:
values without autograd (plain causal, a KV cache, per-row document positions with and without the document
mask), the eager path itself under autograd, and no block ever as large as the whole (T, S) grid."""

import pytest
import torch

from posbench.model import bias_attention, far_field
from posbench.model.bias_attention import block_spans, blocked_bias_attention
from posbench.model.kernels import KERNELS, EagerKernel, select_kernel
from posbench.model.masks import causal_mask
from posbench.model.packing import Documents
from posbench.model.sdpa_bias_kernel import BlockedBiasKernel
from posbench.pe import PES
from tests.conftest import build_test_model

BIAS_PES = [n for n in PES.names() if build_test_model(n).pe.has_score_mod]
BOS = 60  # the test model's vocabulary is 61


@pytest.fixture
def small_blocks(monkeypatch):
    """5 queries per block, so a 27-token call runs 6 blocks, the last one short; the far-field path (ALiBi, T5,
    relative_learned) in chunks of 5 from one query on."""
    monkeypatch.setattr(bias_attention, "BLOCK_ELEMENTS", 1)
    monkeypatch.setattr(bias_attention, "MIN_BLOCK_ROWS", 5)
    monkeypatch.setattr(far_field, "CHUNK_ROWS", 5)
    monkeypatch.setattr(far_field, "MIN_QUERIES", 1)


def with_kernel(model, name):
    for layer, block in enumerate(model.blocks):  # the layer's own sliding window, if any, stays
        block.attn.kernel = KERNELS[name](model.pe.layer_pe(layer), "cpu", 0.0, block.attn.kernel.window)
    return model


def decoded(model, kernel, idx, prompt):
    """Logits of idx[:, :prompt] through a fresh KV cache, then of each later token one step at a time, with
    `kernel` in every layer."""
    with_kernel(model, kernel)
    cache = model.new_cache()
    with torch.no_grad():
        steps = [model(idx[:, :prompt], cache=cache).logits]
        steps += [model(idx[:, t:t + 1], cache=cache).logits for t in range(prompt, idx.shape[1])]
    return torch.cat(steps, dim=1)


def test_the_bias_pes_are_all_here():
    assert {"alibi", "t5", "kerple_log", "kerple_power", "fire", "relative_learned"} <= set(BIAS_PES)


def test_cpu_picks_it_for_a_bias_and_it_is_still_the_eager_kernel():
    alibi, rope = build_test_model("alibi").pe, build_test_model("rope").pe
    kernel = select_kernel("auto", alibi, "cpu")
    assert kernel.name == "sdpa_bias" and isinstance(kernel, EagerKernel)
    assert select_kernel("auto", rope, "cpu").name == "sdpa"
    assert select_kernel("eager", alibi, "cpu").name == "eager"  # the reference stays selectable


def test_block_spans_by_hand():
    """causal_mask(8, 10): query t sees keys 0 .. 2 + t. Rows 0-3 see keys 0-5 at most, and keys 3-5 are hidden
    from some of them; rows 4-7 see 0-9, keys 7-9 hidden from some."""
    assert block_spans(causal_mask(8, 10, "cpu"), 4) == [(0, 4, 0, 6, 3, 6), (4, 8, 0, 10, 7, 10)]
    # a window-like mask (keys before t - 1 hidden too): the span starts late, and every key needs its -inf check
    band = causal_mask(6, 6, "cpu") & ~causal_mask(6, 6, "cpu").tril(-2)
    assert block_spans(band, 3) == [(0, 3, 0, 3, 0, 3), (3, 6, 2, 6, 2, 6)]


@pytest.mark.parametrize("name", BIAS_PES)
@pytest.mark.parametrize("packing", [None, ("document", "document"), ("causal", "document"), "window"])
def test_logits_equal_the_eager_kernels(name, packing, small_blocks):
    """The whole model, eager vs sdpa_bias, same weights, several blocks per call: plain causal windows,
    documents (per-row positions, with and without the document mask), and a sliding window of 6 keys."""
    if packing == "window":
        overrides = ["model.attention_window=6"]
    else:
        overrides = [] if packing is None else [f"model.packing.mask={packing[0]}",
                                                f"model.packing.positions={packing[1]}", f"model.packing.bos_id={BOS}"]
    model = build_test_model(name, overrides=overrides).eval()
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(0, BOS, (2, 27), generator=gen)
    idx[0, [0, 7, 18]] = BOS
    idx[1, [4, 9]] = BOS
    with torch.no_grad():
        ref = with_kernel(model, "eager")(idx).logits
        out = with_kernel(model, "sdpa_bias")(idx).logits
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", BIAS_PES)
@pytest.mark.parametrize("window", [None, 6])
def test_kv_cache_decoding_equals_the_eager_kernels(name, window, small_blocks):
    """A prompt of 13 through the cache, then one token at a time (T < S: bottom-right causal blocks), with and
    without a sliding window."""
    model = build_test_model(name, overrides=[] if window is None else [f"model.attention_window={window}"]).eval()
    idx = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(2))

    torch.testing.assert_close(decoded(model, "sdpa_bias", idx, 13), decoded(model, "eager", idx, 13),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["alibi", "t5", "fire"])
def test_under_autograd_it_is_the_eager_kernel_bit_for_bit(name):
    """Training (grad enabled) runs the eager reference: same loss and gradients to the last bit."""
    results = []
    for kernel in ("eager", "sdpa_bias"):
        model = with_kernel(build_test_model(name).train(), kernel)
        idx = torch.randint(0, 61, (2, 20), generator=torch.Generator().manual_seed(3))
        loss = model(idx[:, :-1], idx[:, 1:]).loss
        loss.backward()
        results.append((loss, {n: p.grad for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert torch.equal(loss_a, loss_b)
    assert all(torch.equal(grads_a[n], grads_b[n]) for n in grads_a)


def test_a_query_that_sees_no_key_leaves_the_others_exact():
    """Causal and document masks always let a query see itself, but a caller's mask may hide every key: eager
    then gives a NaN row, SDPA a zero row (its convention); either way no other row changes, and a block
    whose queries see nothing at all still runs."""
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    allowed = causal_mask(4, 4, "cpu").clone()
    allowed[2] = False
    zero_bias = lambda q0, q1, k0, k1: torch.zeros(2, q1 - q0, k1 - k0)
    out = blocked_bias_attention(q, k, v, zero_bias, allowed, block_spans(allowed, 1))
    probs = torch.softmax((q @ k.transpose(-1, -2) / 8 ** 0.5).masked_fill(~allowed, float("-inf")), -1)
    ref = probs @ v
    assert torch.isnan(ref[:, :, 2]).all() and (out[:, :, 2] == 0).all()
    keep = [0, 1, 3]
    torch.testing.assert_close(out[:, :, keep], ref[:, :, keep], rtol=1e-5, atol=1e-6)


def test_no_block_holds_the_whole_grid():
    """At 2,048 tokens and 4 heads the bias is evaluated on blocks of BLOCK_ELEMENTS / (4 x S) = 128 queries and
    only the keys they may see: never a (heads, T, S) grid, and about half of T x S in all (causal)."""
    pe = build_test_model("alibi").pe
    T, H = 2048, 4
    grids = []
    mod = pe.score_mod(0, torch.arange(T), torch.arange(T))
    fast = pe.speed.fast_bias(0, torch.arange(T), torch.arange(T))

    def spy(score, b, h, q_idx, kv_idx):
        grids.append((q_idx.numel(), kv_idx.numel()))
        return mod(score, b, h, q_idx, kv_idx)

    q, k, v = (torch.randn(1, H, T, 8) for _ in range(3))
    with torch.no_grad():
        out = BlockedBiasKernel(pe, "cpu", 0.0)(q, k, v, spy, training=False)  # no FastBias: the score_mod's grid
        ref = EagerKernel(pe, "cpu", 0.0)(q, k, v, mod, training=False)
        gathered = BlockedBiasKernel(pe, "cpu", 0.0)(q, k, v, spy, training=False, fast=fast)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gathered, ref, rtol=1e-5, atol=1e-5)
    assert grids == [(128, 128 * (i + 1)) for i in range(16)]
    assert sum(r * s for r, s in grids) == 17 * T * T // 32


def test_documents_without_the_mask_use_per_row_positions():
    """Per-row positions (positions=document) reach the bias without the document mask: the batched grid."""
    doc_q = torch.tensor([[0, 0, 1, 1, 1]])
    docs = Documents(doc_q, doc_q, masked=False)
    pe = build_test_model("alibi").pe
    pos = torch.tensor([[0, 1, 0, 1, 2]])
    mod = pe.score_mod(0, pos, pos)
    q, k, v = (torch.randn(1, 4, 5, 8) for _ in range(3))
    with torch.no_grad():
        out = BlockedBiasKernel(pe, "cpu", 0.0)(q, k, v, mod, training=False, docs=docs,
                                                fast=pe.speed.fast_bias(0, pos, pos))
        ref = EagerKernel(pe, "cpu", 0.0)(q, k, v, mod, training=False, docs=docs)
        window = EagerKernel(pe, "cpu", 0.0)(q, k, v, pe.score_mod(0, torch.arange(5), torch.arange(5)), False)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    assert (out - window).abs().max() > 1e-3  # the per-row positions did change something


@pytest.mark.parametrize("name", ["alibi", "t5", "kerple_power", "relative_learned"])
def test_the_distance_table_gives_the_grids_bias(name):
    """distance_blocks (a strided view of the bias by distance, rows last to first) against materialize_bias on
    the same block, wherever the block's queries may look; 7 queries after 5 cached keys, blocks of 3."""
    from posbench.model.bias_attention import distance_blocks
    from posbench.model.kernels import materialize_bias

    model = build_test_model(name)
    with torch.no_grad():
        for p in model.pe.parameters():  # zero-initialised tables (T5, relative_learned): give them values
            p.copy_(torch.rand_like(p) + 0.1)
    T, S, H = 7, 12, 4
    pos_q, pos_k = torch.arange(S - T, S), torch.arange(S)
    mod = model.pe.layer_pe(1).score_mod(1, pos_q, pos_k)
    distance = model.pe.layer_pe(1).speed.fast_bias(1, pos_q, pos_k).table(H)
    assert distance.rows == T
    table = distance.bias_HS
    assert table.shape == (H, S)
    blocks = distance_blocks(table, T, S, 3)
    allowed = causal_mask(T, S, "cpu")
    for q0, q1, k0, k1, _, _ in block_spans(allowed, 3):
        got = blocks(q0, q1, k0, k1).flip(1)
        want = materialize_bias(mod, H, q1 - q0, k1 - k0, "cpu", q0=q0, k0=k0)
        seen = allowed[q0:q1, k0:k1].expand_as(want)
        torch.testing.assert_close(got[seen], want[seen], rtol=1e-6, atol=1e-6)


def test_only_a_relative_bias_at_consecutive_positions_is_gathered(monkeypatch):
    """ALiBi at consecutive positions never evaluates the score_mod on a grid, nor does FIRE (a distance table
    before its threshold, its piecewise-linear `rows_bias` after); ALiBi at spread-out positions does; all three
    equal the eager kernel."""
    from posbench.model import sdpa_bias_kernel

    calls = []
    real = sdpa_bias_kernel.materialize_bias
    monkeypatch.setattr(sdpa_bias_kernel, "materialize_bias", lambda *a, **k: calls.append(1) or real(*a, **k))
    q, k, v = (torch.randn(2, 4, 30, 8) for _ in range(3))
    for name, pos, gathered in [("alibi", torch.arange(30.0), True), ("fire", torch.arange(30.0), True),
                                ("alibi", torch.arange(30.0) * 2, False)]:
        pe = build_test_model(name).pe.layer_pe(0)
        mod = pe.score_mod(0, pos, pos)
        calls.clear()
        with torch.no_grad():
            out = BlockedBiasKernel(pe, "cpu", 0.0)(q, k, v, mod, training=False, fast=pe.speed.fast_bias(0, pos, pos))
            n_calls = len(calls)
            ref = EagerKernel(pe, "cpu", 0.0)(q, k, v, mod, training=False)
        assert (n_calls == 0) == gathered, (name, n_calls)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_one_head_decoding_leaves_the_distance_table_alone():
    """One head, one query per call: a block of the distance table is (1, 1, N), contiguous as a view; the -inf the
    kernel writes must go to a copy. Several blocks in one call read the same table, so a write would show."""
    from posbench.model.bias_attention import distance_blocks

    table = torch.arange(6.0)[None]
    blocks = distance_blocks(table, 1, 6, 1)
    first = blocks(0, 1, 0, 6)
    first.fill_(float("-inf"))
    torch.testing.assert_close(blocks(0, 1, 0, 6), table.flip(-1)[None])  # distance 5 - j for key j
