"""Stick-breaking attention (Tan et al. 2025) against the authors' semantics re-derived by hand: the attention weights
the model applies (softmax of its rewritten logits) equal A_ij = beta_ij prod_{j<k<i} (1 - beta_ik), beta =
sigmoid(q.k / sqrt(K)), with the leftover stick on the query's own value (shawntan/stickbreaking-attention sb_ref.py
and the reference forward in shawntan/stickbreaking-attention/tests/test_attn.py), in float64 loops over i, j, k;
the layer's output equals the authors' form sum_j A_ij v_j + rem_i v_i; cached decoding equals the full forward;
eager is the only kernel; training and export."""

import math

import pytest
import torch

from posbench.evaluation.generate import greedy_cached, greedy_recompute
from posbench.evaluation.loading import load_model
from posbench.pe.encoding import attention_bias
from tests.conftest import assert_eager_only, build_test_model, decode_in_parts
from tests.pe.test_pe_dynamic import layer0_qk


def sigmoid(z):
    return 1 / (1 + math.exp(-z))


def stick_breaking_reference(q_BHTK, k_BHTK, attend_current):
    """(B, H, T, T) float64 weights: for j < i (j <= i with attend_current) A_ij = beta_ij prod over the keys k
    between them (j < k < i; j < k <= i with attend_current) of (1 - beta_ik); A_ii gains 1 - sum_j A_ij."""
    B, H, T, K = q_BHTK.shape
    q, k = q_BHTK.double().tolist(), k_BHTK.double().tolist()
    out = torch.zeros(B, H, T, T, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                beta = [sigmoid(sum(x * y for x, y in zip(q[b][h][i], k[b][h][j])) / math.sqrt(K))
                        for j in range(i + 1)]
                last = i if attend_current else i - 1  # the last key that takes a share
                for j in range(last + 1):
                    a = beta[j]
                    for m in range(j + 1, last + 1):
                        a *= 1 - beta[m]
                    out[b, h, i, j] = a
                out[b, h, i, i] += 1 - out[b, h, i].sum()
    return out


@pytest.mark.parametrize("attend_current", [False, True])
def test_weights_match_the_authors_definition_by_hand(attend_current):
    model = build_test_model("stick_breaking", overrides=[f"pe.attend_current={attend_current}"]).eval()
    idx = torch.randint(0, 61, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = model.attention_scores(idx)[0].double().softmax(-1)
        _, q, k = layer0_qk(model, idx)
    want = stick_breaking_reference(q, k, attend_current)
    assert (got - want).abs().max().item() < 1e-6
    assert torch.equal(got.triu(1), torch.zeros_like(got))
    # the keys take shares from the nearest back: without the remainder, row i's weights sum to 1 - prod (1 - beta)
    assert (want.sum(-1) - 1).abs().max() < 1e-12


def test_layer_output_is_the_authors_stick_plus_remainder_times_own_value():
    """sb_ref.stickbreaking returns (att @ v, 1 - att.sum(-1)) over the keys before the query; ref_fwd adds
    rem * v: the attention output of layer 0, before the output projection, is that."""
    model = build_test_model("stick_breaking").eval()
    attn = model.blocks[0].attn
    idx = torch.randint(0, 61, (1, 8), generator=torch.Generator().manual_seed(5))
    x = model.blocks[0].attn_norm(model.tok_emb(idx))
    pos = torch.arange(8.0)
    with torch.no_grad():
        q, k, v, _ = attn._qkv(x, pos, model.pe, None)
        mod = attention_bias(model.pe, 0, pos, pos, None)
        got = attn.kernel(q, k, v, mod, False).double()
    z = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    before = torch.ones(8, 8, dtype=torch.bool).tril(-1)  # the keys strictly before the query
    log_z = torch.nn.functional.logsigmoid(z).masked_fill(~before, -1e5)
    log_beta = torch.nn.functional.logsigmoid(-z).masked_fill(~before, 0)
    cum = torch.ones(8, 8, dtype=torch.float64).tril(-1)  # sum over the keys after j
    att = (log_z + torch.einsum("bhij,jk->bhik", log_beta, cum)).exp()
    want = att @ v.double() + (1 - att.sum(-1))[..., None] * v.double()
    assert (got - want).abs().max().item() < 1e-5


@pytest.mark.parametrize("window", [None, 4], ids=["full", "window4"])
def test_cached_decoding_equals_the_full_forward(window):
    over = [] if window is None else [f"model.attention_window={window}"]
    model = build_test_model("stick_breaking", overrides=over).eval()
    idx = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(idx).logits
    torch.testing.assert_close(decode_in_parts(model, idx, 9, 4)[0], full, rtol=1e-5, atol=1e-5)


def test_only_the_eager_kernel_runs_it_and_flops_count_the_row_sums():
    pe = build_test_model("stick_breaking").pe
    assert_eager_only(pe)
    assert pe.speed.layer_flops(0, 100) == (4 * 4 * 100, 3 * 4 * 4 * 100)
    assert pe.speed.logits_mod_bytes(2, 4, 8, 16) == 4 * 2 * 4 * 8 * 5 * 16


def test_trains_with_finite_gradients_decodes_with_its_cache_and_exports_with_parity(tmp_path):
    from tests.interop.test_hf_export import checkpoint

    run = checkpoint(tmp_path, "stick_breaking")  # a short training run on random tokens, then weights perturbed
    model = load_model(run, "cpu").model
    prompt = torch.randint(0, 257, (2, 12), generator=torch.Generator().manual_seed(0))
    assert torch.equal(greedy_cached(model, prompt, 12), greedy_recompute(model, prompt, 12))
    model.train()
    model(prompt).logits.square().mean().backward()
    assert all(p.grad.isfinite().all() for p in model.parameters() if p.grad is not None)
    pytest.importorskip("transformers")
    from tests.interop.test_hf_export_parity import assert_exports_with_parity

    assert_exports_with_parity(tmp_path, run)
