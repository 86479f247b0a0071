"""model.attention_chunk (chunked local attention, Llama 4): the rule by hand, each kernel that applies it equal to
a float64 softmax over the same keys, with a window beside it, cached decoding equal to the full forward, documents,
the refusals and the FLOPs' key count."""

import math

import pytest
import torch

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.model.masks import causal_mask, chunk_mask
from tests.model.option_helpers import cached_minus_full, model_with, second_document_minus_alone


def test_the_rule_by_hand():
    T, S, C = 5, 12, 4  # a cache of 7 keys, then 5 queries at key indices 7 .. 11
    got = causal_mask(T, S, "cpu") & chunk_mask(T, S, "cpu", C)
    want = torch.tensor([[j <= i and j // C == i // C for j in range(S)] for i in range(S - T, S)])
    assert torch.equal(got, want)


@pytest.mark.parametrize("pe,kernel", [("rope", "sdpa"), ("rope", "eager"), ("alibi", "sdpa_bias"),
                                       ("alibi", "eager"), ("alibi", "flex")])
@pytest.mark.parametrize("window", ["null", "3"])
def test_each_kernel_equals_the_float64_softmax_over_the_chunk(pe, kernel, window):
    cfg, model = model_with(f"pe.name={pe}", f"model.attention={kernel}", "model.attention_chunk=5",
                            f"model.attention_window={window}")
    attn, layer_pe = model.blocks[0].attn, model.pe.layer_pe(0)
    x = torch.randn(2, 16, cfg.model.d_model, generator=torch.Generator().manual_seed(0))
    pos = model.positions(16, "cpu")
    with torch.no_grad():
        q, k, v, _ = attn._qkv(x, pos, layer_pe, None)
        mod = layer_pe.score_mod(0, pos, pos) if layer_pe.has_score_mod else None
        got = attn.kernel(q, k, v, mod, False, None, None)
        s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
        if mod is not None:
            from posbench.model.kernels import materialize_bias
            s = s + materialize_bias(mod, q.shape[1], 16, 16, "cpu").double()
        W = None if window == "null" else int(window)
        allowed = torch.tensor([[j <= i and j // 5 == i // 5 and (W is None or i - j < W) for j in range(16)]
                                for i in range(16)])
        want = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v.double()
    assert (got.double() - want).abs().max() < 1e-5


@pytest.mark.parametrize("pe,kernel", [("rope", "sdpa"), ("alibi", "sdpa_bias"), ("hybrid", "auto"), ("rope", "flex")])
def test_cached_decoding_equals_the_full_forward_with_chunks(pe, kernel):
    cfg, model = model_with(f"pe.name={pe}", f"model.attention={kernel}", "model.n_layers=4",
                            "model.attention_chunk=[6,6,6,null]", "model.attention_sinks=true")
    assert cached_minus_full(model, cfg.model.vocab_size) < 1e-5


@pytest.mark.parametrize("kernel", ["auto", "flex"])
def test_chunks_within_documents(kernel):
    """Document masking and chunks together: a document placed at a chunk boundary of the row gives its own logits."""
    assert second_document_minus_alone("model.attention_chunk=10", f"model.attention={kernel}") < 1e-5


def test_refusals_and_flops(monkeypatch):
    from posbench.model.kernels import FlashAlibiKernel, select_kernel
    from posbench.pe import PES

    pe = PES.build(PES.get("alibi").Config(), load_config(model_size="nano").model.pe_context())
    monkeypatch.setattr(FlashAlibiKernel, "supports", classmethod(lambda cls, *a: None))  # as if on CUDA
    with pytest.raises(ConfigError, match="model.attention=flash_alibi cannot apply model.attention_chunk"):
        select_kernel("flash_alibi", pe, "cpu", chunk=8)
    with pytest.raises(ConfigError, match="model.attention_chunk entries must be positive integers"):
        load_config(overrides=["model.attention_chunk=[0]"], model_size="nano")
    with pytest.raises(ConfigError, match="model.attention_chunk is implemented for the decoder only"):
        load_config(overrides=["model.attention_chunk=8", "model.arch.name=mamba"], model_size="nano")
    from posbench.model.flops import model_stats

    cfg, _ = model_with("model.attention_chunk=[16,null]")
    plain, _ = model_with()
    a, b = model_stats(cfg.model, cfg.pe, "cpu"), model_stats(plain.model, plain.pe, "cpu")
    assert b.flops_per_token_train - a.flops_per_token_train == pytest.approx(12 * cfg.model.d_model * (64 - 16))
