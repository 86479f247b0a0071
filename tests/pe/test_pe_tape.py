"""TAPE against the authors' computation (VITA-Group/TAPE models/llama/adape.py), re-derived here in float64 with
their layout (cos and sin each K wide, duplicated halves) and their einsums, and its whole-model claims: an untrained
TAPE is RoPE, and a trained one keeps RoPE's shift invariance at every layer."""

import pytest
import torch
import torch.nn.functional as F

from posbench.config import load_config
from posbench.errors import ConfigError
from tests.conftest import build_test_model


def authors_layer(q, k, v, cos, sin, W_post, W_up, W_x, W_down, mlp_out):
    """One decoder layer's position update as adape.py writes it (PELlamaAttention.forward, LlamaDecoderLayer.forward,
    PELayer.forward), float64: cos, sin (B, H, T, K); returns attention output and the new (cos, sin)."""
    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)

    q_embed, k_embed = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    T = q.shape[2]
    w = q_embed @ k_embed.transpose(2, 3) / q.shape[-1] ** 0.5
    w = w.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
    out, pos = w @ v, (w @ cos, w @ sin)
    pos = tuple(torch.einsum("bqnd,qe->bqnd", p, W_post) + r for p, r in zip(pos, (cos, sin)))
    up = tuple(torch.einsum("bqnd,eq->bend", p, W_up) for p in pos)
    x_e = tuple(F.silu((mlp_out @ W_x.T).transpose(1, 2).unsqueeze(-1)) * u for u in up)
    down = tuple(torch.einsum("bend,qe->bqnd", x, W_down) for x in x_e)
    return out, tuple(d + r for d, r in zip(down, pos))


def test_one_layer_is_the_authors_attention_and_mlp_update():
    model = build_test_model("tape").eval().double()  # the contract's overrides: every update weight non-zero
    pe, B, H, T, K, D = model.pe, 2, 4, 6, 8, 32
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, K, generator=g, dtype=torch.float64) for _ in range(3))
    half = torch.randn(B, H, T, K, generator=g, dtype=torch.float64)  # a state away from RoPE's unit circle
    mlp_out = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    c, s = half[..., : K // 2], half[..., K // 2:]
    layer = 1
    want_out, (want_cos, want_sin) = authors_layer(
        q, k, v, torch.cat((c, c), -1), torch.cat((s, s), -1), pe.post_LHH[layer], pe.up_LPH[layer],
        pe.x_LPD[layer], pe.down_LHP[layer], mlp_out)
    with torch.no_grad():
        q2, k2, v2 = pe.carry_in(layer, q, k, v, half)
        out = F.scaled_dot_product_attention(q2, k2, v2, is_causal=True)  # the kernel mixes v and the state alike
        out, state = pe.carry_out(layer, out, half.float())
        state = pe.carry_mlp(layer, mlp_out, state)
    torch.testing.assert_close(out.double(), want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state.double(), torch.cat((want_cos[..., : K // 2], want_sin[..., : K // 2]), -1),
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(want_cos[..., : K // 2], want_cos[..., K // 2:])  # the halves stay duplicated


def test_the_start_state_is_ropes_cos_and_sin():
    pe = build_test_model("tape").pe
    state = pe.start_state(torch.tensor([0.0, 3.0]))
    K = 8
    freq = 10000.0 ** (-torch.arange(0, K, 2, dtype=torch.float64) / K)
    want = torch.cat(((3 * freq).cos(), (3 * freq).sin()))
    assert state.shape == (1, 1, 2, K)
    torch.testing.assert_close(state[0, 0, 1].double(), want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(state[0, 0, 0], torch.cat((torch.ones(4), torch.zeros(4))))


def test_an_untrained_tape_is_rope():
    """The authors zero W_up and the attention update (adape.py `_init_weights`): the first forward is RoPE's."""
    tape, rope = build_test_model("tape", overrides=["pe.zero_init=true"]).eval(), build_test_model("rope").eval()
    missing, unexpected = tape.load_state_dict(rope.state_dict(), strict=False)
    assert not unexpected and all(name.startswith("pe.") for name in missing)
    idx = torch.randint(0, 61, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(tape(idx).logits, rope(idx).logits, rtol=1e-5, atol=1e-5)


def test_a_trained_tape_keeps_shift_invariance_at_every_layer():
    """The paper's orthogonal equivariance: every update is linear in the state per channel, so shifting every
    position turns every state alike and no logit changes, in the last layer as in the first."""
    model = build_test_model("tape").eval()
    with torch.no_grad():
        for p in (model.pe.post_LHH, model.pe.up_LPH):
            p.normal_(0.0, 0.5)  # updates far from zero
    idx = torch.randint(0, 61, (2, 12), generator=torch.Generator().manual_seed(2))
    pos = torch.arange(12, dtype=torch.float32)
    with torch.no_grad():
        a, b = model(idx, pos_T=pos).logits, model(idx, pos_T=pos + 37).logits
        rope_like = build_test_model("tape").eval()
        rope_like.load_state_dict(model.state_dict())
        rope_like.pe.up_LPH.zero_()
        rope_like.pe.post_LHH.zero_()
        c = rope_like(idx, pos_T=pos).logits
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert (a - c).abs().max() > 1e-3  # the updates did change what the model computes


def test_training_shifts_every_position_by_one_draw_up_to_twice_the_training_length():
    pe = build_test_model("tape").pe.train()
    torch.manual_seed(0)
    firsts = set()
    for _ in range(40):
        pos = pe.positions(5, "cpu")
        torch.testing.assert_close(pos - pos[0], torch.arange(5.0))
        firsts.add(int(pos[0]))
    assert max(firsts) <= 2 * 64 and len(firsts) > 20
    assert pe.eval().positions(5, "cpu").tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("overrides", [["pe.name=hybrid", "pe.pattern=[{name: tape}, {name: rope}]"],
                                       ["model.arch.name=encoder_decoder", "model.arch.decoder_pe.name=seqpe"]])
def test_a_state_or_an_objective_the_model_would_not_carry_is_refused(overrides):
    """A hybrid member or the encoder-decoder would drop TAPE's state or SeqPE's objectives: refused, exit 2."""
    with pytest.raises(ConfigError, match="model's PE|decoder-only"):
        load_config(overrides=["model.d_model=32", "model.n_heads=4", "model.n_layers=2", *overrides])
