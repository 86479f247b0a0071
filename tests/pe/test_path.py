"""PaTH attention (Yang et al. 2025) against its definition re-derived by hand: the model's logits equal, in float64
loops over i, j and t, s_ij = q_i^T H_i ... H_{j+1} k_j / sqrt(K) with H_t = I - beta_t w_t w_t^T, w and beta made
from the PE's weights as the authors' layer makes them (fla-org/flash-linear-attention fla/layers/path_attn.py:
d -> 32 -> H*K, a causal width-3 depthwise convolution, silu, L2 norm with eps 1e-6; beta = 2 sigmoid(Linear)), and
the authors' decoding (every stored key updated by k <- k - beta (w.k) w, then the new key appended); w = 0 is NoPE
bit for bit; cached decoding equals the full forward; eager is the only kernel; training; FLOPs; the export."""

import math

import pytest
import torch

from posbench.config import load_config
from posbench.evaluation.generate import greedy_cached, greedy_recompute
from posbench.evaluation.loading import load_model
from posbench.model.flops import model_stats
from posbench.pe import path as path_module
from tests.conftest import assert_eager_only, build_test_model, decode_in_parts
from tests.pe.test_pe_dynamic import layer0_qk


def directions_by_hand(pe, x_TD):
    """(w (H, T, K), beta (H, T)) in float64 Python loops: the low-rank projection, the causal convolution of width
    3 over each channel (weight[2] on the token itself), silu, then each head's w over sqrt(|w|^2 + 1e-6)."""
    H, K = pe.ctx.n_heads, pe.ctx.head_dim
    down, up = pe.w_down_LRD[0].double(), pe.w_up_LWR[0].double()
    conv, bw, bb = pe.w_conv_LWC[0].double(), pe.beta_LHD[0].double(), pe.beta_bias_LH[0].double()
    x = x_TD.double()
    T = x.shape[0]
    pre = [up @ (down @ x[t]) for t in range(T)]
    w = torch.zeros(H, T, K, dtype=torch.float64)
    for t in range(T):
        for c in range(H * K):
            z = sum(conv[c, 2 - back].item() * pre[t - back][c].item() for back in range(3) if t - back >= 0)
            w[c // K, t, c % K] = z / (1 + math.exp(-z))
    w = w / (w.square().sum(-1, keepdim=True) + 1e-6).sqrt()
    beta = 2 * torch.sigmoid(x @ bw.t() + bb).t()
    return w, beta


def logits_by_products(q_TK, k_TK, w_TK, beta_T):
    """(T, T): q_i^T H_i ... H_{j+1} k_j / sqrt(K) for j <= i, the product built matrix by matrix; -inf above."""
    T, K = q_TK.shape
    out = torch.full((T, T), float("-inf"), dtype=torch.float64)
    for i in range(T):
        for j in range(i + 1):
            P = torch.eye(K, dtype=torch.float64)
            for t in range(i, j, -1):
                P = P @ (torch.eye(K, dtype=torch.float64) - beta_T[t] * torch.outer(w_TK[t], w_TK[t]))
            out[i, j] = q_TK[i] @ P @ k_TK[j] / math.sqrt(K)
    return out


def logits_by_rank_one_updates(q_TK, k_TK, w_TK, beta_T):
    """(T, T): the authors' decoding, path_attn.py lines 149-159: at token t every stored key takes k - beta_t
    (w_t . k) w_t, the new key is appended as it is, and the query scores the stored keys."""
    T, K = q_TK.shape
    out = torch.full((T, T), float("-inf"), dtype=torch.float64)
    stored = []
    for t in range(T):
        stored = [k - beta_T[t] * (w_TK[t] @ k) * w_TK[t] for k in stored] + [k_TK[t]]
        out[t, :t + 1] = torch.stack(stored) @ q_TK[t] / math.sqrt(K)
    return out


@pytest.mark.parametrize("chunk", [64, 3], ids=["one_chunk", "chunks_of_3"])
def test_logits_match_the_definition_and_the_authors_decoding_by_hand(monkeypatch, chunk):
    monkeypatch.setattr(path_module, "CHUNK", chunk)
    model = build_test_model("path").eval()
    with torch.no_grad():  # weights away from init, so that beta is not near 1 and w is far from uniform
        for p in model.pe.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    idx = torch.randint(0, 61, (2, 10), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = model.attention_scores(idx)[0].double()
        x, q, k = layer0_qk(model, idx)
    for b in range(2):
        w, beta = directions_by_hand(model.pe, x[b])
        for h in range(4):
            want = logits_by_products(q[b, h].double(), k[b, h].double(), w[h], beta[h])
            decoded = logits_by_rank_one_updates(q[b, h].double(), k[b, h].double(), w[h], beta[h])
            torch.testing.assert_close(decoded, want, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(got[b, h], want, rtol=1e-5, atol=1e-5)
    plain = (q.double() @ k.double().transpose(-1, -2) / math.sqrt(8)).tril()
    assert (got.tril() - plain).abs().max() > 1e-2  # the transforms do change the logits


def test_w_zero_is_nope_bit_for_bit():
    """w's second projection zeroed: w = 0 / sqrt(0 + 1e-6) = 0, every H_t = I (beta = 2 sigmoid(.) is never 0, so
    the identity comes from w): the logits are NoPE's with the same weights, exactly."""
    model = build_test_model("path").eval()
    nope = build_test_model("none", attention="eager").eval()
    with torch.no_grad():
        model.pe.w_up_LWR.zero_()
    nope.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("pe.")})
    idx = torch.randint(0, 61, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(model(idx).logits, nope(idx).logits)
        assert torch.equal(model.attention_scores(idx)[1], nope.attention_scores(idx)[1])


@pytest.mark.parametrize("chunk,window", [(64, None), (4, None), (4, 6)], ids=["one_chunk", "chunks", "window6"])
def test_cached_decoding_equals_the_full_forward(monkeypatch, chunk, window):
    monkeypatch.setattr(path_module, "CHUNK", chunk)
    over = [] if window is None else [f"model.attention_window={window}"]
    model = build_test_model("path", overrides=over).eval()
    idx = torch.randint(0, 61, (2, 23), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(idx).logits
    got, cache = decode_in_parts(model, idx, 9, 5)
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-5)
    # the cache keeps each token's w projection (before the convolution) and beta beside the raw keys
    assert cache.layers[0].feats_BHS.shape == (2, 4, 8 + 1, 23)


def test_only_the_eager_kernel_runs_it():
    pe = build_test_model("path").pe
    assert_eager_only(pe)
    # the memory check's peak: two (T_pad, S_pad) float32 matrices of the assembly, then the correction's (T, S)
    assert pe.speed.logits_mod_bytes(2, 4, 8, 16) == 4 * 2 * 4 * (2 * 16 * 16 + 8 * 16)  # one chunk of 16
    assert pe.speed.logits_mod_bytes(1, 4, 1, 130) == 4 * 4 * (2 * 64 * 192 + 130)  # decoding: the last chunk's rows


def test_training_steps_reach_every_path_parameter():
    model = build_test_model("path").train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    idx = torch.randint(0, 61, (4, 33), generator=torch.Generator().manual_seed(2))
    losses = []
    for _ in range(4):
        logits = model(idx[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        for name, p in model.pe.named_parameters():
            assert p.grad is not None and p.grad.isfinite().all() and p.grad.abs().sum() > 0, name
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]


def test_flops_count_the_key_transforms():
    """model_stats adds layer_flops per layer; its O(S K) term per head and token is the q.k - q~.k~ correction,
    and the whole count is 1-2x the matmul FLOPs torch counts in logits_mod (which leaves out the solves and
    skips the chunk pairs after the query: posbench counts every key, as for attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = build_test_model("path", seq_len=128)
    pe = model.pe
    fwd, train = pe.speed.layer_flops(0, 128)
    assert train == 3 * fwd
    H, K, D = 4, 8, 32
    per_head = 10 * 64 * K + 64 * (64 + K) + 2 * 64 * 64 + 2 * K * K + 4 * K * 128 + 2 * K * K * 128 / 64
    assert fwd == 4 * D * 32 + 6 * D + 2 * D * H + H * (per_head + 128)
    cfg = load_config(overrides=["model.size=test", "model.d_model=32", "model.n_layers=4", "model.n_heads=4",
                                 "model.d_ff=64", "model.seq_len=128", "model.vocab_size=61"], pe_type="path")
    stats = model_stats(cfg.model, cfg.pe, "cpu")  # describe_model's figures, the model built on meta
    assert stats.flops_pe_train == pytest.approx(4 * train) and stats.flops_pe_forward == pytest.approx(4 * fwd)
    B, T = 2, 128
    q, k = torch.randn(B, H, T, K), torch.randn(B, H, T, K)
    feats = pe.token_features(0, torch.randn(B, T, D))
    s = (q @ k.transpose(-1, -2)).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    with FlopCounterMode(display=False) as counter:
        pe.logits_mod(0, q, s, k, feats)
    counted = counter.get_total_flops() / (B * T)  # per token, the w and beta projections not in logits_mod
    assert 1 < (fwd - 4 * D * 32 - 2 * D * H) / counted < 2  # the count is not causal-halved, as the model's


def test_trains_in_the_loop_decodes_with_its_cache_and_exports_with_parity(tmp_path):
    from tests.interop.test_hf_export import checkpoint

    run = checkpoint(tmp_path, "path")  # a short training run on random tokens, then weights perturbed
    model = load_model(run, "cpu").model
    prompt = torch.randint(0, 257, (2, 12), generator=torch.Generator().manual_seed(0))
    assert torch.equal(greedy_cached(model, prompt, 12), greedy_recompute(model, prompt, 12))
    pytest.importorskip("transformers")
    from tests.interop.test_hf_export_parity import assert_exports_with_parity

    assert_exports_with_parity(tmp_path, run)  # the shipped PaTH, its cache included, against posbench's
