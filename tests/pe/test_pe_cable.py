"""CABLE (Veisi et al. 2025) against the authors' definition re-derived by hand: the logit of query i and key j is
q_i.k_j / sqrt(K) plus b_i - b_j, b = cumsum over tokens of -softplus(w_h.x_t + c_h) (axiomlab/Cable src/Cable.py
lines 39, 47), in float64 loops over i, j, t; zero per-token terms are NoPE; cached decoding equals the full
forward; flex equals eager; a short training run, then export parity."""

import math

import torch

from posbench.config import load_config
from posbench.evaluation.generate import greedy_cached, greedy_recompute
from posbench.evaluation.loading import load_model
from posbench.model.kernels import FlexKernel, select_kernel
from posbench.model.transformer import Transformer
from tests.conftest import build_test_model, decode_in_parts
from tests.pe.test_pe_dynamic import layer0_qk, randomized


def softplus(z):
    return math.log1p(math.exp(z)) if z < 30 else z


def cable_reference(x_BTD, q_BHTK, k_BHTK, w_HD, c_H):
    """s_ij = q_i.k_j / sqrt(K) - sum_{t=j+1}^{i} softplus(w_h.x_t + c_h) for j <= i, -inf above. Python floats."""
    B, H, T, K = q_BHTK.shape
    x, q, k = x_BTD.double().tolist(), q_BHTK.double().tolist(), k_BHTK.double().tolist()
    w, c = w_HD.double().tolist(), c_H.double().tolist()
    dot = lambda a, b: sum(u * v for u, v in zip(a, b))
    out = torch.full((B, H, T, T), float("-inf"), dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                for j in range(i + 1):
                    bias = -sum(softplus(dot(w[h], x[b][t]) + c[h]) for t in range(j + 1, i + 1))
                    out[b, h, i, j] = dot(q[b][h][i], k[b][h][j]) / math.sqrt(K) + bias
    return out


def test_cable_scores_match_the_authors_definition_by_hand():
    model = randomized("cable")
    idx = torch.randint(0, 61, (2, 7), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        got = model.attention_scores(idx)[0]
        x, q, k = layer0_qk(model, idx)
    pe = model.pe
    assert pe.weight_LHD.shape == (4, 4, 32) and pe.bias_LH.shape == (4, 4)  # Linear(d_model, heads) per layer
    want = cable_reference(x, q, k, pe.weight_LHD[0], pe.bias_LH[0])
    assert (got.double() - want).nan_to_num(posinf=0, neginf=0).abs().max() < 1e-5
    assert torch.equal(got.isinf(), want.isinf())
    # the bias is never positive and grows in magnitude with distance: b_ii - b_ij <= b_ii - b_i(j+1)
    bias = (got.double() - (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(8)).tril()
    assert (bias <= 1e-6).all() and (bias[..., 1:, :-1].diff(dim=-1).tril() >= -1e-6).all()


def test_cable_init_and_decay_follow_the_authors_code():
    pe = build_test_model("cable").pe
    assert pe.bias_LH.eq(0).all() and 0.015 < pe.weight_LHD.std().item() < 0.025  # _init_weights: N(0, 0.02), 0
    assert pe.decay_params() == [pe.weight_LHD]  # dim >= 2 decayed, the bias not


def test_zero_per_token_terms_are_nope():
    """softplus(h) -> 0 as h -> -inf: with w = 0 and c = -1e4 every bias term is 0 in float32, and the model is
    NoPE with the same weights."""
    model = build_test_model("cable").eval()
    with torch.no_grad():
        model.pe.weight_LHD.zero_()
        model.pe.bias_LH.fill_(-1e4)
    nope = build_test_model("none").eval()
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("pe.")}
    nope.load_state_dict(state)
    idx = torch.randint(0, 61, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(idx).logits, nope(idx).logits, rtol=0, atol=1e-6)


def test_cable_cached_decoding_and_flex_equal_the_full_forward():
    model = randomized("cable")
    idx = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx).logits
    cached, cache = decode_in_parts(model, idx, 9, 4)
    assert cache.layers[0].feats_BHS.shape == (2, 4, 16)  # every key's -softplus(h) is cached
    torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.kernel = FlexKernel(model.pe, "cpu", 0.0)
        torch.testing.assert_close(model(idx).logits, full, rtol=1e-4, atol=1e-4)
    assert select_kernel("auto", model.pe, "cuda").name == "flex"  # a score_mod: FlexAttention on CUDA


def test_cable_flops_count_its_projection_and_bias():
    cfg = load_config(overrides=["model.size=nano"], pe_type="cable")
    pe = Transformer(cfg.model, cfg.pe).pe
    H, D = cfg.model.n_heads, cfg.model.d_model
    assert pe.speed.layer_flops(0, 100)[0] == 2 * D * H + H + 2 * H * 100


def test_cable_trains_decodes_with_its_cache_and_exports_with_parity(tmp_path):
    import pytest

    from tests.interop.test_hf_export import checkpoint

    run = checkpoint(tmp_path, "cable")  # a short training run on random tokens, then every weight perturbed
    model = load_model(run, "cpu").model
    prompt = torch.randint(0, 257, (2, 12), generator=torch.Generator().manual_seed(0))
    assert torch.equal(greedy_cached(model, prompt, 12), greedy_recompute(model, prompt, 12))
    pytest.importorskip("transformers")
    from tests.interop.test_hf_export_parity import assert_exports_with_parity

    assert_exports_with_parity(tmp_path, run)
