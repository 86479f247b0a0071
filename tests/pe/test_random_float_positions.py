"""Random float sampling (RFS, Shimizu et al. 2026: `randomized` with pe.positions=float): the draws (sorted reals
uniform on [0, max_positions), at training and at evaluation from the fixed seed), the attention it gives the three
inner PEs of the paper (RoPE logits, ALiBi bias, sinusoidal table) against their formulas evaluated at those real
positions in float64 loops, the refusal of inner PEs that would floor them, training, and the export."""

import math

import pytest
import torch

from posbench.config import load_config
from posbench.config_loader import ConfigError
from tests.conftest import build_test_model

FLOAT = ["pe.positions=float"]


def rfs(inner="rope", seed=0):
    return build_test_model("randomized", seed=seed, overrides=[*FLOAT, f"pe.inner.name={inner}"])


def test_draws_are_sorted_reals_uniform_on_the_range_in_training_and_reproducible_at_evaluation():
    pe = rfs().pe  # max_positions=256 (conftest)
    pe.train()
    torch.manual_seed(0)
    draws = torch.stack([pe.positions(32, "cpu") for _ in range(400)]).double()
    assert (draws.diff(dim=1) >= 0).all() and draws.min() >= 0 and draws.max() < 256
    assert (draws != draws.round()).float().mean() > 0.99  # reals, not the integer sampler's values
    assert not torch.equal(draws[0], draws[1])  # a fresh draw per forward pass in training
    # pooled, uniform on [0, 256): each of 8 bins holds 1/8 of the 12800 values (binomial sd ~ 37)
    counts = torch.histc(draws.flatten(), bins=8, min=0, max=256)
    assert (counts - 1600).abs().max() < 200
    # the k-th of 32 sorted uniforms has mean 256 k / 33
    expected = 256 * torch.arange(1, 33, dtype=torch.float64) / 33
    assert (draws.mean(0) - expected).abs().max() < 6
    pe.eval()
    a, b, c = pe.positions(32, "cpu"), pe.positions(32, "cpu"), pe.positions(33, "cpu")
    assert torch.equal(a, b) and not torch.equal(a, c[:32])
    assert (a != a.round()).any() and (a.diff() >= 0).all()


def test_integer_is_the_default_and_unchanged():
    pe = build_test_model("randomized").pe.eval()
    pos = pe.positions(40, "cpu")
    assert pe.cfg.positions == "integer" and torch.equal(pos, pos.round()) and pos.unique().numel() == 40


def rope_logits_reference(q_HTK, k_HTK, pos_T, base=10000.0):
    """RoPE (Su et al. 2021) with half-split pairs (channel f with f + K/2): q_i . k_j rotated by angle
    (p_i - p_j) theta_f, theta_f = base^(-2f/K), summed over pairs; real-valued positions. Python complex."""
    H, T, K = q_HTK.shape
    F = K // 2
    q, k, p = q_HTK.double().tolist(), k_HTK.double().tolist(), pos_T.double().tolist()
    out = torch.zeros(H, T, T, dtype=torch.float64)
    for h in range(H):
        for i in range(T):
            for j in range(T):
                s = 0.0
                for f in range(F):
                    zq = complex(q[h][i][f], q[h][i][f + F])
                    zk = complex(k[h][j][f], k[h][j][f + F])
                    theta = base ** (-2 * f / K)
                    s += (zq * zk.conjugate() * complex(math.cos((p[i] - p[j]) * theta),
                                                         math.sin((p[i] - p[j]) * theta))).real
                out[h, i, j] = s
    return out


def test_rope_at_float_positions_gives_the_rotation_by_the_real_distance():
    model = rfs("rope").eval()
    pos = model.pe.positions(6, "cpu")
    assert (pos != pos.round()).all()
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 4, 6, 8, generator=gen), torch.randn(1, 4, 6, 8, generator=gen)
    qr, kr = model.pe.layer_pe(0).rotate(q, k, pos)
    got = (qr.double() @ kr.double().transpose(-1, -2))[0]
    want = rope_logits_reference(q[0], k[0], pos)
    assert (got - want).abs().max().item() < 1e-4 * want.abs().max().item()


def test_alibi_at_float_positions_is_the_slope_times_the_real_distance_in_the_models_scores():
    model = rfs("alibi").eval()
    idx = torch.randint(0, 61, (1, 7), generator=torch.Generator().manual_seed(0))
    pos = model.pe.positions(7, "cpu")
    attn = model.blocks[0].attn
    x = model.blocks[0].attn_norm(model.tok_emb(idx))
    pe = model.pe.layer_pe(0)  # the wrapper's inner ALiBi, what the block hands its attention
    got = attn.scores(x, pos, pe)[0].double()
    q, k, _, _ = attn._qkv(x, pos, pe, None)
    H, K = 4, q.shape[-1]
    qk = (q.double() @ k.double().transpose(-1, -2))[0] / math.sqrt(K)
    p = pos.double().tolist()
    for h in range(H):
        slope = 2.0 ** (-8.0 * (h + 1) / H)  # Press et al. 2022, H a power of two
        for i in range(7):
            for j in range(7):
                if j > i:
                    assert got[h, i, j] == float("-inf")
                else:
                    want = qk[h, i, j].item() - slope * (p[i] - p[j])
                    assert abs(got[h, i, j].item() - want) < 1e-5


def test_sinusoidal_at_float_positions_is_the_table_at_the_real_position():
    model = rfs("sinusoidal").eval()
    pos = model.pe.positions(5, "cpu")
    x = torch.zeros(1, 5, 32)
    got = model.pe.embed(x, pos)[0].double()
    scale = got.new_tensor(model.pe.inner.cfg.scale or model.pe.inner.default_scale())
    for t, p in enumerate(pos.double().tolist()):
        for i in range(0, 32, 2):
            angle = p / 10000.0 ** (i / 32)
            assert abs(got[t, i] - scale * math.sin(angle)) < 1e-6
            assert abs(got[t, i + 1] - scale * math.cos(angle)) < 1e-6


@pytest.mark.parametrize("inner", ["learned", "t5", "integer"])
def test_inner_pes_that_would_floor_a_real_position_are_refused(inner):
    with pytest.raises(ConfigError, match=f"`{inner}` would floor"):
        load_config(overrides=[*FLOAT, f"pe.inner.name={inner}"], pe_type="randomized")


@pytest.mark.parametrize("inner", ["alibi", "rope", "sinusoidal"])
def test_rfs_trains_and_exports_with_parity(tmp_path, inner):
    from tests.interop.test_hf_export import checkpoint

    run = checkpoint(tmp_path, "randomized", *FLOAT, f"pe.inner.name={inner}")  # trains on random tokens
    pytest.importorskip("transformers")
    from tests.interop.test_hf_export_parity import assert_exports_with_parity

    assert_exports_with_parity(tmp_path, run)
