"""model.attention_sinks (model/attention_sinks.py): the sink softmax re-derived by hand in float64, each kernel
that carries sinks equal to it (eager, sdpa, sdpa_bias, flex on CPU), cached decoding equal to the full forward,
windows and documents, the refusals, and sinks at -inf (exp = 0) reducing to the plain softmax."""

import math

import pytest
import torch

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.model.attention import Attention
from posbench.model.build import build_model
from posbench.model.kernels import KERNELS, FlashAlibiKernel
from posbench.model.masks import causal_mask
from posbench.pe import PES
from tests.model.option_helpers import cached_minus_full
from tests.model.option_helpers import model_with as nano_model_with


def model_with(*overrides):
    cfg, model = nano_model_with("model.attention_sinks=true", *overrides)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.sinks.copy_(torch.linspace(-3, 3, cfg.model.n_heads))
    return cfg, model


def sink_attention_by_hand(q, k, v, sinks, window=None):
    """float64: p = exp(s) / (exp(sink) + sum exp(s)) over the allowed keys; out = p v."""
    q, k, v = q.double(), k.double(), v.double()
    T, S = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    allowed = causal_mask(T, S, "cpu", window)
    e = torch.where(allowed, s.exp(), torch.zeros(()))
    p = e / (e.sum(-1, keepdim=True) + sinks.double().exp().view(1, -1, 1, 1))
    return p @ v


@pytest.mark.parametrize("name", ["eager", "sdpa", "flex"])
@pytest.mark.parametrize("window", [None, 5])
def test_each_kernel_equals_the_float64_sink_softmax(name, window):
    pe = PES.build(PES.get("rope").Config(), load_config(model_size="nano").model.pe_context())
    kernel = KERNELS.get(name)(pe, "cpu", 0.0, window)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 12, 16, generator=g) for _ in range(3))
    sinks = torch.tensor([-2.0, 0.0, 1.0, 3.0])
    with torch.no_grad():
        got = kernel(q, k, v, None, False, sinks_H=sinks)
    assert (got.double() - sink_attention_by_hand(q, k, v, sinks, window)).abs().max() < 1e-5


@pytest.mark.parametrize("pe,kernel", [("rope", "sdpa"), ("rope", "eager"), ("alibi", "sdpa_bias"),
                                       ("rope", "flex"), ("alibi", "eager")])
def test_cached_decoding_equals_the_full_forward_with_sinks(pe, kernel):
    cfg, model = model_with(f"pe.name={pe}", f"model.attention={kernel}", "model.attention_window=[6,null]")
    assert cached_minus_full(model, cfg.model.vocab_size) < 1e-5


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_sinks_with_documents(kernel):
    """With the document mask each document sees its own keys and the sink: the second document of a row gives
    the logits of that document alone."""
    cfg, model = model_with(f"model.attention={kernel}", "model.packing.mask=document",
                            "model.packing.positions=document", "model.packing.bos_id=1")
    doc = torch.randint(2, cfg.model.vocab_size, (1, 10), generator=torch.Generator().manual_seed(0))
    doc[0, 0] = 1
    row = torch.cat((doc.roll(3, 1).clamp(min=2), doc), dim=1)
    with torch.no_grad():
        assert (model(row).logits[:, 10:] - model(doc).logits).abs().max() < 1e-5


def test_sinks_at_minus_infinity_are_the_plain_softmax_and_off_adds_no_parameter():
    cfg, sunk = model_with()
    plain_cfg = load_config(overrides=["model.n_layers=2", "model.seq_len=64"], model_size="nano")
    torch.manual_seed(0)
    plain = build_model(plain_cfg.model, plain_cfg.pe, "cpu").eval()
    assert set(sunk.state_dict()) - set(plain.state_dict()) == {"blocks.0.attn.sinks", "blocks.1.attn.sinks"}
    assert plain.blocks[0].attn.sinks is None
    sunk.load_state_dict({**plain.state_dict(), **{f"blocks.{i}.attn.sinks": torch.full((4,), -1e4)
                                                   for i in (0, 1)}})
    ids = torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (sunk(ids).logits - plain(ids).logits).abs().max() < 1e-6


def test_a_kernel_that_cannot_carry_sinks_is_refused():
    pe = PES.build(PES.get("alibi").Config(), load_config(model_size="nano").model.pe_context())
    with pytest.raises(ConfigError, match="model.attention=flash_alibi cannot carry model.attention_sinks"):
        Attention(64, 4, 0, FlashAlibiKernel(pe, "cuda", 0.0), sinks=True)
    with pytest.raises(ConfigError, match="model.attention_sinks is implemented for the decoder only"):
        load_config(overrides=["model.attention_sinks=true", "model.arch.name=mamba"], model_size="nano")


def test_sinks_are_not_counted_as_matmul_weights():
    from posbench.model.flops import model_stats

    cfg, _ = model_with()
    plain_cfg = load_config(overrides=["model.n_layers=2", "model.seq_len=64"], model_size="nano")
    with_sinks, without = model_stats(cfg.model, cfg.pe, "cpu"), model_stats(plain_cfg.model, plain_cfg.pe, "cpu")
    assert with_sinks.params_total == without.params_total + 2 * cfg.model.n_heads
    assert with_sinks.params_matmul == without.params_matmul
