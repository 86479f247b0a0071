"""The rotary family of 2024-2026 against independent references: transformers' own rope init and apply code
(partial rotary, llama3, longrope), tables worked by hand (modded-nanogpt, HoPE), the papers' formulas written
out element by element (FoPE's per-slot Fourier mixture, PoPE's logits)."""

import math

import pytest
import torch

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.model.flops import model_stats
from posbench.pe import PES, PEContext
from posbench.pe.fope import fope_coefficients
from posbench.pe.rope import rope_inv_freq
from posbench.pe.rope_scaling import SCALINGS

transformers = pytest.importorskip("transformers")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.gpt_neox.modeling_gpt_neox import (  # noqa: E402
    GPTNeoXRotaryEmbedding,
    apply_rotary_pos_emb,
)


def build(name, ctx, **options):
    cls = PES.get(name)
    return PES.build(cls.Config(**options), ctx)


# -- partial rotary ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("fraction", [0.25, 0.5, 1.0])
def test_partial_rotary_matches_transformers_gpt_neox(fraction):
    """inv_freq from GPT-NeoX's compute_default_rope_parameters (partial_rotary_factor) and q, k from its
    apply_rotary_pos_emb on random inputs equal ours with pe.rotary_fraction."""
    H, K, T = 2, 32, 11
    hf_cfg = transformers.GPTNeoXConfig(hidden_size=H * K, num_attention_heads=H, rotary_pct=fraction,
                                        rotary_emb_base=10000, max_position_embeddings=64)
    hf_inv, _ = GPTNeoXRotaryEmbedding.compute_default_rope_parameters(hf_cfg)
    pe = build("rope", PEContext(d_model=H * K, n_heads=H, n_layers=1, seq_len=64), rotary_fraction=fraction)
    assert pe.rotary_dim == int(K * fraction) == 2 * hf_inv.shape[0]
    torch.testing.assert_close(pe.inv_freq_base, hf_inv, rtol=2e-7, atol=0)  # theta^-x vs 1/theta^x: 1 ulp

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(3, H, T, K, generator=g), torch.randn(3, H, T, K, generator=g)
    pos = torch.arange(5, 5 + T)
    cos, sin = GPTNeoXRotaryEmbedding(hf_cfg)(q, pos[None].expand(3, -1))
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    got_q, got_k = pe.rotate(q, k, pos.float())
    torch.testing.assert_close(got_q, want_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, want_k, rtol=1e-5, atol=1e-5)
    R = pe.rotary_dim
    assert torch.equal(got_q[..., R:], q[..., R:])  # the pass-through channels are untouched, bit for bit


def test_rotary_fraction_one_is_exactly_rope():
    ctx = PEContext(d_model=32, n_heads=2, n_layers=1, seq_len=64)
    q, k = torch.randn(2, 2, 9, 16), torch.randn(2, 2, 9, 16)
    pos = torch.arange(9.0)
    for a, b in zip(build("rope", ctx).rotate(q, k, pos), build("rope", ctx, rotary_fraction=1.0).rotate(q, k, pos)):
        assert torch.equal(a, b)


def test_partial_rotary_refuses_an_odd_channel_count():
    with pytest.raises(ConfigError, match="3 channels, which must be an even number"):
        load_config(model_size="nano", overrides=["model.d_model=48", "model.n_heads=4", "pe.name=rope",
                                                  "pe.rotary_fraction=0.25"])  # int(12 * 0.25) = 3 channels
    with pytest.raises(ConfigError, match="rotary_fraction must be in"):
        PES.get("rope").Config(rotary_fraction=0.0)


# -- modded-nanogpt ----------------------------------------------------------------------------------------
def test_modded_rope_table_by_hand():
    """K = 16: K/4 = 4 frequencies (1/1024)^(j/3) = 1, 1024^(-1/3), 1024^(-2/3), 1/1024, then 4 zeros."""
    pe = build("modded_rope", PEContext(d_model=32, n_heads=2, n_layers=1, seq_len=64))
    want = torch.tensor([1.0, 0.0992126, 0.0098431, 0.0009765625, 0.0, 0.0, 0.0, 0.0])
    torch.testing.assert_close(pe.inv_freq_base, want, rtol=1e-5, atol=0)
    q, k = torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16)
    got_q, _ = pe.rotate(q, k, torch.arange(100.0, 105.0))
    zero_slots = [4, 5, 6, 7, 12, 13, 14, 15]  # pairs (j, j + 8) for the zero frequencies j = 4..7
    assert torch.equal(got_q[..., zero_slots], q[..., zero_slots])
    assert not torch.allclose(got_q[..., [0, 8]], q[..., [0, 8]])


# -- HoPE --------------------------------------------------------------------------------------------------
def test_hope_rotates_only_components_with_a_full_period_within_training():
    """K = 16, theta 10^4, L = 32: theta_i = 10^(-i/2), periods 2 pi / theta_i = 6.28, 19.9, 62.8, 199, ...; only
    the first two fit in 32 positions, the other six become position-free."""
    ctx = PEContext(d_model=32, n_heads=2, n_layers=1, seq_len=32)
    periods = [2 * math.pi / 10 ** (-i / 2) for i in range(8)]
    rotating = [p <= 32 for p in periods]
    assert rotating == [True, True] + [False] * 6
    want = torch.tensor([10 ** (-i / 2) if r else 0.0 for i, r in enumerate(rotating)], dtype=torch.float32)
    pe = build("hope", ctx)
    torch.testing.assert_close(pe.inv_freq_base, want, rtol=1e-6, atol=0)
    q, k = torch.randn(1, 2, 4, 16), torch.randn(1, 2, 4, 16)
    got_q, _ = pe.rotate(q, k, torch.arange(7.0, 11.0))
    fixed = [2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15]
    assert torch.equal(got_q[..., fixed], q[..., fixed])


# -- FoPE --------------------------------------------------------------------------------------------------
def test_fope_coefficients_identity_step_identity_and_noise():
    # d < D: slot j's dominant frequency is w_{j * ceil(D/d)}
    torch.testing.assert_close(fope_coefficients(1, 3, 2, gain=0.0)[0], torch.tensor([[1.0, 0], [0, 0], [0, 1.0]]))
    torch.testing.assert_close(fope_coefficients(2, 4, 4, gain=0.0), torch.eye(4).expand(2, 4, 4))
    # xavier_normal over (H, D, d): std = gain * sqrt(2 / (D d + H d))
    H, D, d, gain = 64, 32, 16, 0.3
    step_eye = fope_coefficients(1, D, d, 0.0)[0]
    noise = fope_coefficients(H, D, d, gain, generator=torch.Generator().manual_seed(0)) - step_eye
    assert noise.std().item() == pytest.approx(gain * math.sqrt(2 / (D * d + H * d)), rel=0.03)


def test_fope_rotates_each_slot_by_its_fourier_mixture():
    """K = 16, L = 32: D = 2 frequencies (1, 10^-0.5) turn within 32 positions, d = min(2, K/4) = 2 slots. Slot j:
    c = sum_i C[h,i,j] cos(w_i n), s = sum_i S[h,i,j] sin(w_i n) (the columns as drawn, the authors' default),
    channel j -> x_j c - x_{j+8} s, channel j+8 -> x_{j+8} c + x_j s; slots 2..7 are zero frequency (unchanged)."""
    torch.manual_seed(3)
    ctx = PEContext(d_model=32, n_heads=2, n_layers=1, seq_len=32)
    pe = build("fope", ctx)
    assert (pe.n_in, pe.n_out) == (2, 2)
    cos_c, sin_c = pe.cos_coef[0], pe.sin_coef[0]  # the one layer's set
    assert (cos_c - torch.eye(2)).abs().max() > 1e-3  # the extra frequencies are really mixed in
    w = [1.0, 10 ** -0.5]
    q = torch.randn(1, 2, 3, 16)
    pos = [4.0, 9.0, 30.0]
    got, _ = pe.rotate(q, q.clone(), torch.tensor(pos))
    want = q.clone()
    for h in range(2):
        for t, n in enumerate(pos):
            for j in range(2):
                c = sum(cos_c[h, i, j].item() * math.cos(w[i] * n) for i in range(2))
                s = sum(sin_c[h, i, j].item() * math.sin(w[i] * n) for i in range(2))
                a, b = q[0, h, t, j].item(), q[0, h, t, j + 8].item()
                want[0, h, t, j], want[0, h, t, j + 8] = a * c - b * s, b * c + a * s
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_fope_without_noise_is_rope_with_the_sub_2pi_over_l_frequencies_clipped():
    ctx = PEContext(d_model=32, n_heads=2, n_layers=1, seq_len=32)
    q, k = torch.randn(2, 2, 6, 16), torch.randn(2, 2, 6, 16)
    pos = torch.arange(3.0, 9.0)
    for a, b in zip(build("fope", ctx, fourier_gain=0.0).rotate(q, k, pos), build("hope", ctx).rotate(q, k, pos)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


# -- PoPE --------------------------------------------------------------------------------------------------
def test_pope_logits_follow_the_paper_formula():
    """a_ts = sum_c softplus(q_c) softplus(k_c) cos((s - t) theta_c + delta_c) / sqrt(K), theta_c = 10^4^(-c/K),
    delta clamped to [-2 pi, 0]; by hand for K = 2 (theta = 1, 0.01), query at t = 7, key at s = 2."""
    pe = build("pope", PEContext(d_model=4, n_heads=2, n_layers=1, seq_len=16))
    with torch.no_grad():
        pe.phase_bias.copy_(torch.tensor([[[-0.5, -1.25]], [[1.0, -9.0]]]))  # head 1: clamped to 0 and -2 pi
    q = torch.tensor([0.3, -1.2])
    k = torch.tensor([-0.4, 2.0])
    sp = lambda x: math.log1p(math.exp(x))
    theta = [1.0, 0.01]
    for h, delta in enumerate([[-0.5, -1.25], [0.0, -2 * math.pi]]):
        q_BHTK = torch.zeros(1, 2, 1, 2)
        k_BHTK = torch.zeros(1, 2, 1, 2)
        q_BHTK[0, h, 0], k_BHTK[0, h, 0] = q, k
        q2, _ = pe.rotate(q_BHTK, k_BHTK, torch.tensor([7.0]))
        _, k2 = pe.rotate(q_BHTK, k_BHTK, torch.tensor([2.0]))
        assert q2.shape[-1] == 4  # 2K real channels
        logit = (q2[0, h, 0] @ k2[0, h, 0]).item() / math.sqrt(q2.shape[-1])  # the kernels' 1/sqrt(width)
        want = sum(sp(q[c].item()) * sp(k[c].item()) * math.cos((2 - 7) * theta[c] + delta[c])
                   for c in range(2)) / math.sqrt(2)
        assert logit == pytest.approx(want, rel=1e-5)


# -- llama3 and longrope scalings --------------------------------------------------------------------------
def _ours(name, inv, original, length, **kw):
    cfg = SCALINGS[name].Config(name=name, original_max_positions=original, **kw)
    return SCALINGS[name](cfg, train_len=original).transform(inv, torch.arange(float(length)))


@pytest.mark.parametrize("partial", [1.0, 0.5])
def test_llama3_matches_transformers(partial):
    """Llama 3.1's own settings (head dim 128, theta 5e5, factor 8, low 1, high 4, original 8192) hit all three
    regions: kept, divided by 8, and blended."""
    hf_cfg = transformers.LlamaConfig(hidden_size=256, num_attention_heads=2, max_position_embeddings=131072,
                                      rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                       "original_max_position_embeddings": 8192,
                                                       "partial_rotary_factor": partial})
    want, want_att = ROPE_INIT_FUNCTIONS["llama3"](hf_cfg, "cpu")
    inv = rope_inv_freq(int(128 * partial), 500000.0)
    got, att = _ours("llama3", inv, 8192, 100, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    assert att == want_att == 1.0
    ratio = inv / got
    assert (ratio == 1).any() and (ratio == 8).any() and ((ratio > 1.001) & (ratio < 7.999)).any()


def test_longrope_matches_transformers_short_and_long():
    F_, original = 16, 4096
    short = [1.0 + 0.05 * i for i in range(F_)]
    long = [1.0 + 1.5 * i for i in range(F_)]
    hf_cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=2, max_position_embeddings=131072,
                                      rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "factor": 32.0,
                                                       "short_factor": short, "long_factor": long,
                                                       "original_max_position_embeddings": original})
    inv = rope_inv_freq(2 * F_, 10000.0)
    for length, hf_seq_len in [(original, None), (original + 1, original + 1)]:
        want, want_att = ROPE_INIT_FUNCTIONS["longrope"](hf_cfg, "cpu", seq_len=hf_seq_len)
        got, att = _ours("longrope", inv, original, length, factor=32.0, short_factor=short, long_factor=long)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
        assert att == pytest.approx(want_att, rel=1e-12)
    assert want_att == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))


def test_longrope_refuses_missing_or_mismatched_factors():
    with pytest.raises(ConfigError, match="longrope needs pe.scaling.short_factor"):
        SCALINGS["longrope"].Config(name="longrope", factor=4.0)
    with pytest.raises(ConfigError, match="has 2 values but the PE rotates 8 frequencies"):
        load_config(model_size="nano", overrides=[
            "model.d_model=32", "model.n_heads=2", "pe.name=rope", "pe.scaling.name=longrope", "pe.scaling.factor=2",
            "pe.scaling.short_factor=[1.0, 1.0]", "pe.scaling.long_factor=[1.0, 2.0]"])


# -- FLOPs -------------------------------------------------------------------------------------------------
def test_describe_model_counts_the_extra_work_of_pope_and_fope():
    """PoPE: q.k over 2K channels, +2 T D per layer forward (x3 training); FoPE: 2 mixtures of 2 D d H FLOPs per
    layer and position (D = 4 kept frequencies of 8 at L = 256, d = min(4, K/4 = 4))."""
    overrides = ["model.d_model=64", "model.n_heads=4", "model.n_layers=3", "model.seq_len=256"]
    cfgs = {name: load_config(model_size="nano", overrides=[*overrides, f"pe.name={name}"])
            for name in ("rope", "pope", "fope")}
    stats = {name: model_stats(cfg.model, cfg.pe, "cpu") for name, cfg in cfgs.items()}
    T, D, L, H = 256, 64, 3, 4
    assert stats["pope"].params_matmul == stats["rope"].params_matmul
    assert stats["pope"].flops_per_token_train - stats["rope"].flops_per_token_train == 3 * L * 2 * T * D
    assert stats["pope"].flops_per_token_forward - stats["rope"].flops_per_token_forward == L * 2 * T * D
    assert (stats["pope"].flops_pe_train, stats["pope"].flops_pe_forward) == (3 * L * 2 * T * D, L * 2 * T * D)
    n_in = sum(10000 ** (-i / 8) * T >= 2 * math.pi for i in range(8))
    assert n_in == 4
    assert stats["fope"].flops_per_token_forward - stats["rope"].flops_per_token_forward == L * 4 * n_in * 4 * H
