"""RePo against its authors' code (SakanaAI/repo, OLMo/olmo/model.py: `dynamic_position_encoding_swigluex_multihead`,
`RotaryEmbedding.from_positions`, `rotate_half`, `apply_rotary_pos_emb`), re-derived here in float64: the positions
z = W_z(silu(W_g h) * W_c h) per head, RoPE's cos and sin at those positions, q and k rotated; the defaults (layers
from 5/16 of the depth, hidden width D // 8, no biases, truncated-normal weights); in the model the layers below
the start rotate at token indices, and a re-positioning layer whose positions are all 0 is NoPE."""

import pytest
import torch

from posbench.errors import ConfigError
from posbench.model.memory import forward_bytes
from posbench.pe import PES, PEContext
from tests.conftest import build_test_model
from tests.evaluation.helpers import model_config

CTX = PEContext(d_model=32, n_heads=4, n_layers=16, seq_len=64)


def build(ctx=CTX, seed=0, **options):
    torch.manual_seed(seed)
    return PES.build(PES.get("repo").Config(**options), ctx)


def test_defaults_are_the_authors():
    pe = build()
    # dynamic_pe_start_layer 5 of OLMo-2 1B's 16 layers; mid_size = d_model // 8; nn.Linear(..., bias=False)
    assert pe.start == 5 and pe.gate_RMD.shape == (11, 4, 32) and pe.final_RHM.shape == (11, 4, 4)
    assert {n for n, _ in pe.named_parameters()} == {"gate_RMD", "content_RMD", "final_RHM"}
    assert pe.cfg.theta == 10000.0  # the backbone's RoPE base is the run's (theirs: OLMo-2's 5e5)
    for w in pe.parameters():  # init_normal(std 0.02, cutoff 3): a truncated normal
        assert w.abs().max() <= 3 * 0.02 and 0.01 < w.std() < 0.03
    assert build(PEContext(d_model=32, n_heads=4, n_layers=4, seq_len=64)).start == 1  # round(4 * 5 / 16)


def test_options_are_checked():
    with pytest.raises(ConfigError, match="start_share"):
        PES.get("repo").Config(start_share=1.0).check()
    with pytest.raises(ConfigError, match="hidden_divisor"):
        PES.get("repo").Config(hidden_divisor=0).check()


def authors_rotate(q, k, h, W_g, W_c, W_z, theta):
    """Their swigluex_multihead positions, then from_positions and apply_rotary_pos_emb, in float64."""
    pred = (torch.nn.functional.silu(h @ W_g.T) * (h @ W_c.T)) @ W_z.T  # [B, N, H]
    pred = pred.transpose(-1, -2)  # [B, H, N]
    K = q.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, K, 2, dtype=torch.float64) / K)
    freqs = pred[..., None] * inv_freq  # [B, H, N, K/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rotate_half(x):
        x1, x2 = x.view(*x.shape[:-1], 2, K // 2).unbind(dim=-2)
        return torch.cat((-x2, x1), dim=-1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, pred


def test_a_repositioning_layer_rotates_as_their_code():
    pe = build(seed=3)
    # weights large enough that positions span tens of tokens, so every frequency turns visibly
    with torch.no_grad():
        for w in pe.parameters():
            w.normal_(0, 1.0)
    g = torch.Generator().manual_seed(0)
    h, q, k = torch.randn(2, 7, 32, generator=g), torch.randn(2, 4, 7, 8, generator=g), torch.randn(2, 4, 7, 8,
                                                                                                   generator=g)
    layer = 9
    z = pe.token_positions(layer, h)
    got_q, got_k = pe.rotate(q, k, z)
    r = layer - 5
    want_q, want_k, want_z = authors_rotate(q.double(), k.double(), h.double(), pe.gate_RMD[r].double(),
                                            pe.content_RMD[r].double(), pe.final_RHM[r].double(), 10000.0)
    assert z.dtype == torch.float32 and z.abs().max() > 10
    torch.testing.assert_close(z.double(), want_z, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got_q.double(), want_q, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_k.double(), want_k, rtol=1e-4, atol=1e-4)
    assert pe.token_positions(4, h) is None  # below layer 5: RoPE at token indices


def test_in_the_model_lower_layers_are_rope_and_zero_positions_are_nope():
    repo = build_test_model("repo", n_layers=2)  # layer 0 RoPE, layer 1 re-positions (round(2 x 5/16) = 1)
    ref = build_test_model("hybrid", overrides=["pe.pattern=[{name: rope}, {name: none}]"], n_layers=2)
    with torch.no_grad():
        repo.pe.final_RHM.zero_()  # every position 0: cos 1, sin 0, no rotation
    missing, unexpected = ref.load_state_dict(repo.state_dict(), strict=False)
    assert not missing and set(unexpected) == {"pe.gate_RMD", "pe.content_RMD", "pe.final_RHM"}
    ids = torch.randint(0, 61, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, want = repo.attention_scores(ids), ref.attention_scores(ids)
        for layer in range(2):
            torch.testing.assert_close(got[layer], want[layer], rtol=1e-5, atol=1e-5)
        torch.nn.init.normal_(repo.pe.final_RHM, std=1.0)
        moved = repo.attention_scores(ids)
    assert torch.allclose(moved[0], want[0], atol=1e-5)  # layer 0 reads no learned position
    assert not torch.allclose(moved[1], want[1], atol=1e-3)  # layer 1 now rotates at its tokens' positions


def test_the_memory_estimate_prices_the_per_head_rotation_tables():
    """The per-row tables RotaryBase.cos_sin builds at (B, H, T) positions, counted here by hand: angles at half
    and full width, cos, sin and one temporary = 4.5 H K floats a token, plus the H positions."""
    cfg = model_config("repo").model  # d_model 32, 4 heads (K 8), 4 layers
    rope_cfg = model_config("rope").model
    B, T, H, K = 2, 10, 4, 8
    got = forward_bytes(cfg, build_test_model("repo").pe, "cpu", B, T)
    plain = forward_bytes(rope_cfg, build_test_model("rope").pe, "cpu", B, T)
    assert got - plain == B * T * (H + 4 * H * K + H * K // 2) * 4
    pe = build_test_model("repo").pe
    cos, sin = pe.cos_sin(torch.zeros(B, H, T))
    assert cos.shape == sin.shape == (B, H, T, K)  # the tables are per head and token, as priced


def test_it_counts_as_reading_tokens_so_the_encoder_decoder_refuses_it_for_its_encoder():
    from posbench.pe.encoding import reads_tokens
    assert reads_tokens(PES.get("repo")) and not reads_tokens(PES.get("rope"))


def test_flops_count_the_three_projections_of_a_repositioning_layer_only():
    pe = build_test_model("repo").pe  # d_model 32 -> hidden 4, 4 heads; layer 0 keeps token indices
    assert pe.speed.layer_flops(0, 64) == (0.0, 0.0)
    forward = 2 * (32 * 4 + 32 * 4 + 4 * 4)  # W_g, W_c (32 x 4 each) and W_z (4 x 4), a multiply-add per weight
    assert pe.speed.layer_flops(1, 64) == (forward, 3 * forward)


def test_it_adds_no_bias_so_the_planner_gives_it_sdpas_causal_kernel_on_cuda_and_cpu():
    from posbench.model.memory import layer_kernels
    model = build_test_model("repo")
    assert not any(model.pe.layer_pe(i).has_score_mod for i in range(4))
    for device in ("cpu", "cuda"):
        assert [k.name for _, k in layer_kernels(model.cfg, model.pe, device)] == ["sdpa"] * 4
