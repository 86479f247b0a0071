"""Every kernel against the eager reference; kernel choice; KV cache; bf16 autocast."""

import pytest
import torch

from posbench.errors import ConfigError
from posbench.model.kernels import KERNELS, EagerKernel, select_kernel
from posbench.model.masks import causal_mask
from posbench.pe import PES
from posbench.pe.encoding import reads_tokens
from tests.conftest import build_test_model

BIASING = [n for n in PES.names() if any(build_test_model(n).pe.layer_pe(i).has_score_mod for i in range(4))]
UNBIASED = [n for n in PES.names() if n not in BIASING]
# biases that are functions of positions alone (data-dependent ones, CoPE and FoX: tests/pe/test_pe_dynamic.py)
POSITIONAL = [n for n in BIASING if not reads_tokens(PES.get(n))]


def qkv(B=2, H=4, T=24, S=24, K=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, K, generator=g), torch.randn(B, H, S, K, generator=g),
            torch.randn(B, H, S, K, generator=g))


def naive_attention(q, k, v, bias_HTS):
    """Independent reference: per-query loops over allowed keys, no masking tricks."""
    B, H, T, K = q.shape
    S = k.shape[2]
    out = torch.zeros_like(q)
    for t in range(T):
        allowed = S - T + t + 1
        s = (q[:, :, t : t + 1] @ k[:, :, :allowed].transpose(-1, -2)) / K ** 0.5 + bias_HTS[:, t : t + 1, :allowed]
        out[:, :, t] = (torch.softmax(s, -1) @ v[:, :, :allowed])[:, :, 0]
    return out


def test_bias_pes_are_detected():
    assert {"alibi", "t5", "kerple_log", "kerple_power", "fire", "relative_learned"} <= set(BIASING)
    assert "rope" in UNBIASED and "none" in UNBIASED


def test_eager_equals_naive_alibi():
    model = build_test_model("alibi")
    q, k, v = qkv()
    pos = torch.arange(24.0)
    slopes = model.pe.speed.fast_bias(0, pos, pos).alibi_slopes
    bias = -slopes[:, None, None] * (pos[:, None] - pos[None, :]).clamp_min(0)
    eager = EagerKernel(model.pe, "cpu", 0.0)(q, k, v, model.pe.score_mod(0, pos, pos), False)
    torch.testing.assert_close(eager, naive_attention(q, k, v, bias), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", POSITIONAL)
@pytest.mark.parametrize("T,S", [(24, 24), (5, 24)])
def test_flex_forward_equals_eager(name, T, S):
    pe = build_test_model(name).pe
    q, k, v = qkv(T=T, S=S)
    pos_k = torch.arange(float(S))
    for layer in range(4):
        layer_pe = pe.layer_pe(layer)
        mod = layer_pe.score_mod(layer, pos_k[S - T :], pos_k)
        with torch.no_grad():
            ref = KERNELS["eager"](layer_pe, "cpu", 0.0)(q, k, v, mod, False)
            flex = KERNELS["flex"](layer_pe, "cpu", 0.0)(q, k, v, mod, False)
        torch.testing.assert_close(flex, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("T,S", [(16, 16), (3, 16)])
def test_sdpa_equals_eager_without_bias(T, S):
    pe = build_test_model("rope").pe
    q, k, v = qkv(T=T, S=S)
    ref = KERNELS["eager"](pe, "cpu", 0.0)(q, k, v, None, False)
    torch.testing.assert_close(KERNELS["sdpa"](pe, "cpu", 0.0)(q, k, v, None, False), ref, rtol=1e-5, atol=1e-5)


def test_causal_mask_bottom_right():
    assert causal_mask(2, 4, "cpu").tolist() == [[True, True, True, False], [True, True, True, True]]


def test_kernel_choice():
    alibi, rope = build_test_model("alibi").pe, build_test_model("rope").pe
    assert select_kernel("auto", rope, "cpu").name == "sdpa"
    assert select_kernel("auto", rope, "cuda").name == "sdpa"
    assert select_kernel("auto", alibi, "cpu").name == "sdpa_bias"  # the eager kernel, SDPA without autograd
    assert select_kernel("auto", alibi, "cuda").name == "flex"
    with pytest.raises(ConfigError, match="adds a logit bias"):
        select_kernel("sdpa", alibi, "cpu")
    with pytest.raises(ConfigError, match="no attention dropout"):
        select_kernel("flex", alibi, "cuda", attn_dropout=0.1)
    with pytest.raises(ConfigError, match="CUDA only"):
        select_kernel("flash_alibi", alibi, "cpu")
    with pytest.raises(ConfigError, match="not ALiBi"):
        select_kernel("flash_alibi", rope, "cuda")


def test_hybrid_picks_a_kernel_per_layer():
    model = build_test_model("hybrid", overrides=["pe.pattern=[{name: alibi}, {name: none}]"])
    assert model.kernel_names == ["sdpa_bias", "sdpa", "sdpa_bias", "sdpa"]


@pytest.mark.parametrize("name", ["rope", "alibi", "learned", "none", "t5", "xpos", "fire", "hybrid", "pope", "fope",
                                  "hope", "modded_rope", "cope", "fox", "repo", "tape", "seqpe"])
def test_kv_cache_equals_full_forward(name):
    model = build_test_model(name).eval()
    idx = torch.randint(0, 61, (2, 20))
    with torch.no_grad():
        full = model(idx).logits
        cache = model.new_cache()
        parts = [model(idx[:, :12], cache=cache).logits] + [model(idx[:, t : t + 1], cache=cache).logits
                                                            for t in range(12, 20)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["rope", "alibi", "sinusoidal", "fire", "xpos", "binary", "cope", "fox", "repo"])
def test_bf16_autocast_is_finite_and_close(name):
    model = build_test_model(name).eval()
    idx = torch.randint(0, 61, (2, 32))
    with torch.no_grad():
        ref = model(idx).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(idx).logits
    assert torch.isfinite(low).all()
    assert (low.float() - ref).abs().max() < 0.1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["alibi", "t5", "kerple_log", "kerple_power", "fire", "relative_learned"])
def test_compiled_flex_matches_eager_on_gpu(name):
    pe = build_test_model(name).pe.cuda()
    q, k, v = (x.cuda().requires_grad_() for x in qkv(T=128, S=128, K=16))
    pos = torch.arange(128.0, device="cuda")
    mod = pe.score_mod(0, pos, pos)
    ref = KERNELS["eager"](pe, "cuda", 0.0)(q, k, v, mod, True)
    out = KERNELS["flex"](pe, "cuda", 0.0)(q, k, v, mod, True)
    torch.testing.assert_close(out, ref, rtol=2e-3, atol=2e-3)
    g_ref = torch.autograd.grad(ref.sum(), [q, *pe.parameters()], allow_unused=True)
    g_out = torch.autograd.grad(out.sum(), [q, *pe.parameters()], allow_unused=True)
    for a, b in zip(g_ref, g_out):
        if a is not None:
            torch.testing.assert_close(b, a, rtol=2e-3, atol=2e-3)
