"""The far-field path of sdpa_bias (model/far_field.py) and its one-block path (bias_attention.one_block_attention):
the PEs' FarField claims against their own `bias`, the kernel against a float64 softmax written out here, and the
whole model against the eager kernel, prompt and KV-cache decoding, with the far branch shown to run."""

import math

import pytest
import torch

from posbench.model import bias_attention, bias_cost, far_field
from posbench.model.far_field import far_field_attention
from posbench.pe import PES
from posbench.pe.fast_bias import FarField
from tests.conftest import build_test_model
from tests.model.test_bias_attention import decoded, with_kernel

# small buckets and clips, so a 40-token call has keys past them
SHORT = {"alibi": [], "t5": ["pe.num_buckets=8", "pe.max_distance=12"], "relative_learned": ["pe.max_distance=5"]}


def randomized(model):
    """Zero-initialised tables (T5, relative_learned) get distinct values: a test of where the bias is constant
    must not pass because everything is 0."""
    with torch.no_grad():
        for p in model.pe.parameters():
            p.copy_(torch.rand(p.shape, generator=torch.Generator().manual_seed(p.numel())) + 0.1)
    return model


def fast(pe, layer, T=4):
    return pe.layer_pe(layer).speed.fast_bias(layer, torch.arange(float(T)), torch.arange(float(T)))


def test_which_pes_claim_a_far_field():
    claims = {n for n in PES.names() if (f := fast(build_test_model(n).pe, 0)) is not None and f.far_field}
    assert claims == {"alibi", "t5", "relative_learned"}


@pytest.mark.parametrize("name", sorted(SHORT))
def test_the_far_field_is_the_pes_own_bias_from_its_start_on(name):
    """bias(h, d) = intercept + slope d for d = start .. start + 500 at several query positions, through the PE's
    `bias` (the score_mod's formula), for every table; and not at start - 1 (the start is the first such distance:
    T5's last bucket begins there, relative_learned's clip)."""
    pe = randomized(build_test_model(name, overrides=[*SHORT[name], "pe.per_layer=true"])).pe
    H = 4
    assert pe.n_tables == 4  # one table per layer: each layer's FastBias reads its own
    for t in range(pe.n_tables):
        far = fast(pe, t).far_field(H)
        d = torch.arange(far.start, far.start + 500, dtype=torch.float32)
        h = torch.arange(H)[:, None]
        want = far.intercept_H[:, None] + far.slope_H[:, None] * d
        for q_pos in (far.start + 499.0, 4096.0):
            got = pe.bias(t, h, d[None, :], torch.full((1, d.numel()), q_pos))
            torch.testing.assert_close(got.expand(H, -1), want, rtol=1e-6, atol=1e-6)
        if far.start > 0:
            before = pe.bias(t, h, torch.tensor([[far.start - 1.0]]), torch.tensor([[far.start + 0.0]]))
            assert not torch.allclose(before.expand(H, 1), far.intercept_H[:, None] + far.slope_H[:, None] *
                                      (far.start - 1))


def reference(q, k, v, table_HS, far):
    """Float64 softmax(q k^T / sqrt(K) + bias) v, the bias by distance written out: the table below far.start, the
    affine form from it on, the future at -inf; query t at key position S - T + t."""
    B, H, T, K = q.shape
    S = k.shape[-2]
    d = (S - T + torch.arange(T)[:, None]) - torch.arange(S)[None, :]
    affine = far.intercept_H.double()[:, None, None] + far.slope_H.double()[:, None, None] * d
    bias = torch.where(d >= far.start, affine, table_HS.double()[:, d.clamp(0, S - 1)])
    scores = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(K) + bias
    return torch.softmax(scores.masked_fill(d < 0, float("-inf")), -1) @ v.double()


@pytest.mark.parametrize("T, S, start, sloped, rows", [
    (100, 100, 0, True, 16),   # ALiBi-like: every distance affine, 7 chunks (the last short)
    (100, 130, 0, True, 7),    # behind a KV cache of 30 keys
    (100, 100, 9, False, 16),  # T5-like: a constant past distance 9, a near band of 8 keys per chunk
    (37, 80, 9, True, 10),     # a band and a slope, cached keys
    (20, 20, 40, False, 8),    # the band longer than the keys: no chunk has far keys
    (1, 50, 5, True, 4),       # one query (a decoding step)
])
def test_the_kernel_equals_a_float64_softmax(T, S, start, sloped, rows):
    gen = torch.Generator().manual_seed(T + S + start)
    q, k, v = (torch.randn(2, 3, n, 8, generator=gen) for n in (T, S, S))
    slope = torch.tensor([-0.3, -0.05, 0.0]) if sloped else torch.zeros(3)
    far = FarField(start, slope, torch.randn(3, generator=gen))
    d = torch.arange(S)
    affine = far.intercept_H[:, None] + far.slope_H[:, None] * d
    table = torch.where(d >= start, affine, torch.randn(3, S, generator=gen))
    out = far_field_attention(q, k, v, table, far, rows=rows)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), reference(q, k, v, table, far), rtol=1e-5, atol=2e-6)


def test_far_keys_at_long_distances_round_like_the_eager_kernel():
    """4,096 tokens, ALiBi's steepest slope 1/2: the key term a (p0 - j) grows with the distance like the bias
    itself, so the result stays within float32 rounding of a float64 softmax (an absolute a j would not)."""
    T, H = 4096, 2
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, T, 16, generator=gen) for _ in range(3))
    far = FarField(0, torch.tensor([-0.5, -2 ** -8]), torch.zeros(H))
    table = far.slope_H[:, None] * torch.arange(T)
    out = far_field_attention(q, k, v, table, far)
    torch.testing.assert_close(out.double(), reference(q, k, v, table, far), rtol=1e-5, atol=2e-6)


@pytest.fixture
def count_far(monkeypatch):
    """Chunks of 8 queries from 1 query on, the one-block path off, the far field priced below the blocked path
    (at these tiny shapes its calls would cost more: model/bias_cost.py); counts far_field_attention's calls and its
    far branches (SDPA without a mask)."""
    monkeypatch.setattr(far_field, "CHUNK_ROWS", 8)
    monkeypatch.setattr(far_field, "MIN_QUERIES", 1)
    monkeypatch.setattr(bias_attention, "BLOCK_ELEMENTS", 1)
    monkeypatch.setattr(bias_cost, "far", lambda H, T, S, start: 0.0)
    counts = {"calls": 0, "far": 0}
    real_attention, real_flash = far_field.far_field_attention, far_field._flash

    def attention(*a, **kw):
        counts["calls"] += 1
        return real_attention(*a, **kw)

    def flash(*a, attn_mask=None, **kw):
        counts["far"] += attn_mask is None
        return real_flash(*a, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(far_field, "far_field_attention", attention)
    monkeypatch.setattr(far_field, "_flash", flash)
    return counts


@pytest.mark.parametrize("name", sorted(SHORT))
def test_the_model_equals_the_eager_kernel_prompt_and_decoding(name, count_far):
    """The whole model (4 layers, 4 heads), eager vs sdpa_bias on the same weights: a 40-token forward, and a
    25-token prompt through the KV cache followed by 15 steps; the far branch runs in both."""
    model = randomized(build_test_model(name, overrides=SHORT[name])).eval()
    idx = torch.randint(0, 61, (2, 40), generator=torch.Generator().manual_seed(5))

    def run(kernel):
        with torch.no_grad():
            whole = with_kernel(model, kernel)(idx).logits
        return whole, decoded(model, kernel, idx, 25)

    ref_whole, ref_steps = run("eager")
    assert count_far["calls"] == 0
    whole, steps = run("sdpa_bias")
    torch.testing.assert_close(whole, ref_whole, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(steps, ref_steps, rtol=1e-5, atol=1e-5)
    assert count_far["calls"] == 4 * (1 + 1 + 15) and count_far["far"] > 0


def test_a_sliding_window_keeps_the_blocked_path(count_far):
    """Keys that fall out of a window are not far keys: with model.attention_window the far path never runs and
    the result is still eager's."""
    model = build_test_model("alibi", overrides=["model.attention_window=6"]).eval()
    idx = torch.randint(0, 61, (2, 30), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        ref = with_kernel(model, "eager")(idx).logits
        out = with_kernel(model, "sdpa_bias")(idx).logits
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert count_far["calls"] == 0


@pytest.mark.parametrize("name", ["alibi", "t5", "kerple_log", "relative_learned", "fire"])
def test_one_block_calls_gather_the_mask_once(name, monkeypatch):
    """A call whose whole (H, T, S) mask fits one block (a short prompt, decoding steps) gathers it whole and calls
    SDPA once (one_block_attention): from the distance table, or FIRE's rows past its threshold from `rows_bias`;
    equal to eager."""
    from posbench.model import sdpa_bias_kernel

    calls = []
    real = bias_attention.one_block_attention
    monkeypatch.setattr(sdpa_bias_kernel, "one_block_attention", lambda *a: calls.append(1) or real(*a))
    model = randomized(build_test_model(name)).eval()
    idx = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(7))

    torch.testing.assert_close(decoded(model, "sdpa_bias", idx, 13), decoded(model, "eager", idx, 13),
                               rtol=1e-5, atol=1e-5)
    assert len(calls) == 4 * 12


@pytest.mark.parametrize("name", ["alibi", "t5"])
def test_at_512_tokens_the_priced_far_field_runs_and_equals_eager(name, monkeypatch):
    """4 heads x 512 x 512 is exactly BLOCK_ELEMENTS: the old first-rule plan ran the one-block path here (1.7x
    RoPE's evaluation time), the priced plan takes the far field (model/bias_cost.py), and the model's logits are
    still the eager kernel's."""
    from posbench.model import attention_plan, sdpa_bias_kernel
    from posbench.model.attention_plan import BiasPath

    model = randomized(build_test_model(name, seq_len=512)).eval()
    seen = []
    real = attention_plan.plan_bias_call
    monkeypatch.setattr(sdpa_bias_kernel, "plan_bias_call", lambda c: seen.append(real(c)) or seen[-1])
    idx = torch.randint(0, 61, (1, 512), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        ref = with_kernel(model, "eager")(idx).logits
        out = with_kernel(model, "sdpa_bias")(idx).logits
    assert seen == [BiasPath.FAR_FIELD] * 4  # every layer
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
