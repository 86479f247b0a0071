"""The data-dependent PEs, CoPE and FoX, against their papers' equations re-derived by hand (loops over i, j on tiny
inputs), through the model's own attention scores; cached decoding; kernel choice; gradients."""

import math

import pytest
import torch

from posbench.errors import ConfigError
from posbench.model.kernels import EagerKernel, FlexKernel, select_kernel
from tests.conftest import build_test_model, decode_in_parts


def randomized(name, seed=0, overrides=()):
    """The test model with its PE parameters away from their init (CoPE's table starts at zero, which hides it)."""
    model = build_test_model(name, seed=seed, overrides=overrides).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.pe.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.7)
    return model


def layer0_qk(model, idx):
    """Layer 0's attention input, queries and keys (after QK-norm), as the model computes them."""
    pos = torch.arange(float(idx.shape[1]))
    x = model.blocks[0].attn_norm(model.tok_emb(idx))
    q, k, _, _ = model.blocks[0].attn._qkv(x, pos, model.pe, None)
    return x, q, k


def cope_reference(q_HTK, k_HTK, e_KN, npos):
    """Golovneva et al. 2024: g_it = sigmoid(q_i.k_t / sqrt(K)); p_ij = sum_{t=j}^{i} g_it, at most npos - 1;
    e[p] interpolated between e[floor p] and e[ceil p]; logit (q_i.k_j + q_i.e[p_ij]) / sqrt(K). Python floats."""
    H, T, K = q_HTK.shape
    q, k, e = q_HTK.double().tolist(), k_HTK.double().tolist(), e_KN.double().t().tolist()  # e: N rows of K
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))
    out = torch.full((H, T, T), float("-inf"), dtype=torch.float64)
    for h in range(H):
        for i in range(T):
            for j in range(i + 1):
                p = sum(1 / (1 + math.exp(-dot(q[h][i], k[h][t]) / math.sqrt(K))) for t in range(j, i + 1))
                p = min(p, npos - 1)
                lo, hi = math.floor(p), math.ceil(p)
                e_p = [(1 - (p - lo)) * a + (p - lo) * b for a, b in zip(e[lo], e[hi])]
                out[h, i, j] = (dot(q[h][i], k[h][j]) + dot(q[h][i], e_p)) / math.sqrt(K)
    return out


@pytest.mark.parametrize("npos_max", [None, 3])  # 3: positions clamp at 2 within 7 tokens
def test_cope_scores_match_the_paper_by_hand(npos_max):
    over = [] if npos_max is None else [f"pe.npos_max={npos_max}"]
    model = randomized("cope", overrides=over)
    idx = torch.randint(0, 61, (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = model.attention_scores(idx)[0]
        _, q, k = layer0_qk(model, idx)
    npos = npos_max or 64 + 1  # the authors' default: block size + 1
    assert model.pe.table_LKN.shape == (4, 8, npos)  # one table per layer, shared by the heads
    for b in range(2):
        want = cope_reference(q[b], k[b], model.pe.table_LKN[0], npos).float()
        torch.testing.assert_close(got[b], want, rtol=1e-5, atol=1e-5)
    # the position term is really there: without it the logits are q.k / sqrt(K)
    plain = (q @ k.transpose(-1, -2)) / math.sqrt(8)
    finite = torch.isfinite(got)
    assert (got[finite] - plain[finite]).abs().max() > 0.05


def test_cope_positions_carry_gradient_to_the_gates():
    """The interpolation weight p - floor(p) is differentiable: the position term's gradient reaches the logits
    that made the gates (floor and ceil carry none)."""
    pe = randomized("cope").pe
    q = torch.randn(1, 4, 5, 8)
    s = (torch.randn(1, 4, 5, 5)).masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
    s.requires_grad_()
    term = pe.logits_mod(0, q, s) - s
    (grad,) = torch.autograd.grad(term[torch.isfinite(term)].sum(), s)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def fox_reference(x_BTD, q_BHTK, k_BHTK, w_HD, b_H):
    """Lin et al. 2025: f_l = sigmoid(w.x_l + b) per head; logit q_i.k_j / sqrt(K) + log prod_{l=j+1}^{i} f_l."""
    B, H, T, K = q_BHTK.shape
    x, w, bias = x_BTD.detach().double(), w_HD.detach().double(), b_H.detach().double()
    out = torch.full((B, H, T, T), float("-inf"), dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            f = [1 / (1 + math.exp(-(float(w[h] @ x[b, t]) + float(bias[h])))) for t in range(T)]
            for i in range(T):
                for j in range(i + 1):
                    decay = 1.0
                    for l_ in range(j + 1, i + 1):
                        decay *= f[l_]
                    qk = float(q_BHTK[b, h, i].double() @ k_BHTK[b, h, j].double()) / math.sqrt(K)
                    out[b, h, i, j] = qk + math.log(decay)
    return out


def test_fox_scores_match_the_paper_by_hand():
    model = randomized("fox")
    idx = torch.randint(0, 61, (2, 7), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        got = model.attention_scores(idx)[0]
        x, q, k = layer0_qk(model, idx)
    pe = model.pe
    assert pe.weight_LHD.shape == (4, 4, 32) and pe.bias_LH.shape == (4, 4)  # Linear(d_model, heads) per layer
    want = fox_reference(x, q, k, pe.weight_LHD[0], pe.bias_LH[0]).float()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_fox_init_follows_the_authors_code():
    pe = build_test_model("fox").pe
    assert pe.bias_LH.eq(0).all()  # bias 0: f = sigmoid(w.x), about 1/2 at init
    assert 0.015 < pe.weight_LHD.std().item() < 0.025  # N(0, 0.02)


def test_cope_init_follows_the_authors_code():
    pe = build_test_model("cope").pe
    assert pe.table_LKN.eq(0).all()
    shared = build_test_model("cope", overrides=["pe.shared=true"]).pe
    assert shared.table_LKN.shape[0] == 1


@pytest.mark.parametrize("window", [None, 5], ids=["full", "window5"])  # a window hides keys from gates and decay
@pytest.mark.parametrize("name", ["cope", "fox", "grape_a", "grape_ap", "grape_m_ctx",
                                  "selective_rope"])
def test_cached_decoding_equals_the_full_forward(name, window):
    model = randomized(name, overrides=[] if window is None else [f"model.attention_window={window}"])
    idx = torch.randint(0, 61, (2, 16))
    with torch.no_grad():
        full = model(idx).logits
    cached, cache = decode_in_parts(model, idx, 9, 4)
    torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-4)
    if name == "fox":  # the cache keeps every key's log forget gate
        assert cache.layers[0].feats_BHS.shape == (2, 4, 16)


def test_fox_on_flex_equals_eager_with_a_cache():
    """FlexAttention (its CPU forward evaluates the score_mod element by element) reads the gates captured in the
    closure at batch index b: cached decoding on flex equals the eager full forward."""
    model = randomized("fox")
    idx = torch.randint(0, 61, (3, 12))
    with torch.no_grad():
        full = model(idx).logits
        for layer, block in enumerate(model.blocks):
            block.attn.kernel = FlexKernel(model.pe, "cpu", 0.0)
        cache = model.new_cache()
        parts = [model(idx[:, :7], cache=cache).logits] + [model(idx[:, t:t + 1], cache=cache).logits
                                                           for t in range(7, 12)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-4, atol=1e-4)


def test_kernel_choice_for_data_dependent_pes():
    cope, fox = build_test_model("cope").pe, build_test_model("fox").pe
    assert select_kernel("auto", cope, "cuda").name == "eager"  # CoPE needs whole rows of logits
    assert select_kernel("auto", cope, "cpu").name == "eager"
    with pytest.raises(ConfigError, match="model.attention=flex cannot run PE `cope`.*logits_mod"):
        select_kernel("flex", cope, "cuda")
    with pytest.raises(ConfigError, match="adds a logit bias"):
        select_kernel("sdpa", cope, "cpu")
    assert select_kernel("auto", fox, "cuda").name == "flex"
    assert select_kernel("auto", fox, "cpu").name == "sdpa_bias"  # eager under autograd, blocked SDPA without
    assert isinstance(select_kernel("eager", fox, "cuda"), EagerKernel)


def test_encoder_decoder_refuses_a_data_dependent_encoder_pe():
    from posbench.config import load_config

    for name in ("cope", "fox"):
        with pytest.raises(ConfigError, match="causal self-attention"):
            load_config(overrides=["model.size=nano", "model.arch.name=encoder_decoder"], pe_type=name)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fox_compiled_flex_matches_eager_on_gpu_with_gradients():
    model = randomized("fox").cuda().train()
    idx = torch.randint(0, 61, (2, 128), device="cuda")
    ref_model = randomized("fox").cuda().train()
    for block in ref_model.blocks:
        block.attn.kernel = EagerKernel(ref_model.pe, "cuda", 0.0)
    assert model.kernel_names[0] == "sdpa_bias"  # built for CPU: swap in compiled flex
    for block in model.blocks:
        block.attn.kernel = FlexKernel(model.pe, "cuda", 0.0)
    out, ref = model(idx[:, :-1], idx[:, 1:]).loss, ref_model(idx[:, :-1], idx[:, 1:]).loss
    torch.testing.assert_close(out, ref, rtol=2e-3, atol=2e-3)
    out.backward()
    ref.backward()
    torch.testing.assert_close(model.pe.weight_LHD.grad, ref_model.pe.weight_LHD.grad, rtol=2e-2, atol=2e-3)


def test_model_stats_count_the_new_parameters_and_flops_by_hand():
    from posbench.config import load_config
    from posbench.model.flops import model_stats

    base_cfg = load_config(model_size="tiny", pe_type="none")
    base = model_stats(base_cfg.model, base_cfg.pe, "cuda")
    m = base_cfg.model
    L, H, D, T, K = m.n_layers, m.n_heads, m.d_model, m.seq_len, m.d_model // m.n_heads
    fox_cfg = load_config(model_size="tiny", pe_type="fox")
    fox = model_stats(fox_cfg.model, fox_cfg.pe, "cuda")
    assert fox.params_pe == L * (H * D + H) and fox.params_total == base.params_total + L * (H * D + H)
    assert fox.params_matmul == base.params_matmul  # PE parameters are counted apart
    fox_fwd = L * (2 * D * H + H + 2 * H * T)  # gate projection, cumsum, c_i - c_j on every logit
    assert fox.flops_per_token_forward == pytest.approx(base.flops_per_token_forward + fox_fwd)
    assert fox.flops_per_token_train == pytest.approx(base.flops_per_token_train + 3 * fox_fwd)
    assert fox.flops_pe_forward == pytest.approx(fox_fwd) and base.flops_pe_forward == 0
    assert fox.flops_pe_train == pytest.approx(3 * fox_fwd) and base.flops_pe_train == 0
    assert fox.kernels == ["flex"] * L
    cope_cfg = load_config(model_size="tiny", pe_type="cope")
    cope = model_stats(cope_cfg.model, cope_cfg.pe, "cuda")
    N = T + 1
    assert cope.params_pe == L * K * N
    cope_fwd = L * (2 * H * K * N + 8 * H * T)  # q . e table products; cumsum and interpolation over T x T
    assert cope.flops_per_token_train == pytest.approx(base.flops_per_token_train + 3 * cope_fwd)
    assert cope.kernels == ["eager"] * L  # CoPE runs on the eager kernel, on CUDA too
    hybrid_cfg = load_config(model_size="tiny", pe_type="hybrid", overrides=["pe.pattern=[{name: fox}, {name: none}]"])
    hybrid = model_stats(hybrid_cfg.model, hybrid_cfg.pe, "cuda")  # FoX on every other layer
    assert hybrid.flops_per_token_forward == pytest.approx(base.flops_per_token_forward + fox_fwd / 2)
