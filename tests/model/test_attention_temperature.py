"""model.attention_temperature (model/attention_temperature.py): each rule's factor re-derived by hand in float64
(log_n: Chiang & Cholak 2022; ssmax: Nakanishi 2025; llama4: transformers' Llama4TextAttention), the tempered
attention of a rotary and of a bias PE equal to softmax(f(p) * (q.k / sqrt(K) + bias)) in every CPU kernel, cached
decoding equal to the full forward, NoPE-only layers, refusals, and `none` holding nothing."""

import math

import pytest
import torch

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.model.attention_temperature import TEMPERATURES, build_temperature
from tests.model.option_helpers import cached_minus_full, model_with


def temperature(name, n_heads=4, train_len=64, **fields):
    return build_temperature(TEMPERATURES.config(name)(**fields), n_heads, train_len)


def test_each_rule_by_hand():
    pos = torch.arange(40.0)
    log_n = temperature("log_n").factor(pos).double()
    assert torch.allclose(log_n, torch.tensor([math.log(p + 1) / math.log(64) for p in range(40)],
                                              dtype=torch.float64), atol=1e-6)
    assert temperature("log_n", base_len=16).factor(torch.tensor([15.0])).item() == pytest.approx(1.0)
    # at_least_one (SWAN-GPT's inference-time scaling): 1 up to base_len keys, log(n) / log(base_len) past it
    floored = temperature("log_n", base_len=16, at_least_one=True).factor(pos).double()
    want = torch.tensor([max(1.0, math.log(p + 1) / math.log(16)) for p in range(40)], dtype=torch.float64)
    assert torch.allclose(floored, want, atol=1e-6) and (floored[:16] == 1.0).all() and floored[16] > 1.0
    ssmax = temperature("ssmax", init=0.5)
    with torch.no_grad():
        ssmax.s.copy_(torch.tensor([0.5, 1.0, 2.0, 3.0]))
    want = torch.tensor([[s * math.log(p + 1) for p in range(40)] for s in (0.5, 1.0, 2.0, 3.0)], dtype=torch.float64)
    assert torch.allclose(ssmax.factor(pos).double(), want, atol=1e-5)
    llama4 = temperature("llama4", floor_scale=8, scale=0.1).factor(pos).double()
    want = torch.tensor([math.log(math.floor((p + 1) / 8) + 1) * 0.1 + 1 for p in range(40)], dtype=torch.float64)
    assert torch.allclose(llama4, want, atol=1e-6)
    assert llama4[6] == 1.0 and llama4[7] > 1.0  # the first step, at p + 1 = floor_scale


def tempered_by_hand(attn, x, pos, pe, f_T):
    """float64: out = softmax(f(p) * (q.k / sqrt(K) + bias)) v, causal, from the block's q, k, v."""
    with torch.no_grad():
        q, k, v, _ = attn._qkv(x, pos, pe, None)
        q, k, v = q.double(), k.double(), v.double()
        T = x.shape[1]
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        mod = pe.score_mod(attn.layer, pos, pos) if pe.has_score_mod else None
        if mod is not None:
            from posbench.model.kernels import materialize_bias
            s = s + materialize_bias(mod, q.shape[1], T, T, "cpu").double()
        s = s * f_T.double()[..., :, None]
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("pe,kernel", [("rope", "sdpa"), ("rope", "eager"), ("rope", "flex"), ("alibi", "eager"),
                                       ("alibi", "sdpa_bias"), ("alibi", "flex"), ("t5", "sdpa_bias")])
@pytest.mark.parametrize("rule", ["log_n", "llama4"])
def test_tempered_attention_in_each_kernel_equals_the_float64_softmax(pe, kernel, rule):
    extra = ["model.attention_temperature.floor_scale=4", "model.attention_temperature.nope_layers_only=false",
             "model.attention_temperature.scale=0.5"] if rule == "llama4" else []
    cfg, model = model_with(f"pe.name={pe}", f"model.attention={kernel}",
                            f"model.attention_temperature.name={rule}", *extra)
    attn, layer_pe = model.blocks[0].attn, model.pe.layer_pe(0)
    x = torch.randn(2, 20, cfg.model.d_model, generator=torch.Generator().manual_seed(0))
    pos = model.positions(20, "cpu")
    f_T = attn.temperature.factor(pos)
    with torch.no_grad():
        q, k, v, _ = attn._qkv(x, pos, layer_pe, None)
        from posbench.pe.encoding import attention_bias
        mod = attention_bias(layer_pe, 0, pos, pos, None)
        q_t, mod_t, fast = attn._temper(q, mod, pos, layer_pe)
        got = attn.kernel(q_t, k, v, mod_t, False, None, fast)
    assert (got.double() - tempered_by_hand(attn, x, pos, layer_pe, f_T)).abs().max() < 1e-5


@pytest.mark.parametrize("pe,rule", [("rope", "ssmax"), ("alibi", "log_n"), ("hybrid", "llama4")])
def test_cached_decoding_equals_the_full_forward_with_a_temperature(pe, rule):
    over = ["model.n_layers=4", "model.attention_temperature.floor_scale=4"] if rule == "llama4" else []
    cfg, model = model_with(f"pe.name={pe}", f"model.attention_temperature.name={rule}", *over)
    assert cached_minus_full(model, cfg.model.vocab_size) < 1e-5


def test_llama4_tempers_only_the_nope_layers():
    cfg, model = model_with("pe.name=hybrid", "model.n_layers=4", "model.attention_temperature.name=llama4")
    applies = [b.attn.temperature.applies(model.pe.layer_pe(i).kind == "none") for i, b in enumerate(model.blocks)]
    assert applies == [False, False, False, True]


def test_none_holds_nothing_and_ssmax_one_scale_per_head():
    _, plain = model_with()
    _, ssmax = model_with("model.attention_temperature.name=ssmax")
    assert set(ssmax.state_dict()) - set(plain.state_dict()) == {f"blocks.{i}.attn.temperature.s" for i in (0, 1)}
    assert not list(plain.blocks[0].attn.temperature.parameters())


def test_refusals():
    with pytest.raises(ConfigError, match="model.attention_temperature is implemented for the decoder only"):
        load_config(overrides=["model.attention_temperature.name=log_n", "model.arch.name=mamba"], model_size="nano")
    cfg, model = model_with("pe.name=cope", "model.attention_temperature.name=log_n")
    with pytest.raises(ConfigError, match="cannot scale PE `cope`'s logits_mod"):
        model(torch.zeros(1, 4, dtype=torch.long))
