"""model.attention_gate (model/attention_gate.py): the gate re-derived by hand in float64, every kernel on CPU,
cached decoding equal to the full forward, documents, refusals, and `none` leaving the block as it is."""

import copy

import pytest
import torch

from posbench.config import load_config
from posbench.errors import ConfigError
from tests.model.option_helpers import cached_minus_full, model_with, second_document_minus_alone


def attention_by_hand(attn, x_BTD, pos_T, pe):
    """One attention block in float64 from its weights: causal softmax attention, then the gate, then proj."""
    attn, pe = copy.deepcopy(attn).double(), copy.deepcopy(pe).double()
    B, T, D = x_BTD.shape
    H, K = attn.n_heads, attn.head_dim
    x = x_BTD.double()
    q, k, v = (x @ attn.qkv.weight.T).view(B, T, 3, H, K).permute(2, 0, 3, 1, 4)
    q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = pe.rotate(q, k, pos_T)
    s = (q @ k.transpose(-1, -2)) / K ** 0.5
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    out_BTHK = (torch.softmax(s, -1) @ v).transpose(1, 2)
    g = torch.sigmoid(x @ attn.gate.proj.weight.T)
    g = g.view(B, T, H, K) if g.shape[-1] == D else g[..., None]
    return (out_BTHK * g).reshape(B, T, D) @ attn.proj.weight.T


@pytest.mark.parametrize("gate", ["elementwise", "headwise"])
def test_gated_block_equals_its_float64_derivation(gate):
    cfg, model = model_with(f"model.attention_gate={gate}", "pe.name=rope")
    attn = model.blocks[0].attn
    x = torch.randn(2, 12, cfg.model.d_model, generator=torch.Generator().manual_seed(0))
    pos = model.positions(12, "cpu")
    with torch.no_grad():
        got = attn(x, pos, model.pe.layer_pe(0)).double()
        want = attention_by_hand(attn, x, pos, model.pe.layer_pe(0))
    assert (got - want).abs().max() < 1e-5
    assert attn.gate.proj.weight.shape[0] == (cfg.model.d_model if gate == "elementwise" else cfg.model.n_heads)


@pytest.mark.parametrize("pe,kernel", [("rope", "sdpa"), ("rope", "eager"), ("alibi", "sdpa_bias"),
                                       ("alibi", "eager")])
def test_cached_decoding_equals_the_full_forward_with_a_gate(pe, kernel):
    cfg, model = model_with("model.attention_gate=elementwise", f"pe.name={pe}", f"model.attention={kernel}")
    assert cached_minus_full(model, cfg.model.vocab_size) < 1e-5


def test_gate_is_applied_within_documents():
    """Packing splits attention at documents; the gate reads each token's own input, so a row of two documents
    gives the second document's logits as that document alone."""
    assert second_document_minus_alone("model.attention_gate=headwise") < 1e-5


def test_no_gate_adds_no_parameter_and_a_gate_changes_the_output():
    _, plain = model_with()
    _, gated = model_with("model.attention_gate=elementwise")
    assert set(plain.state_dict()) == set(gated.state_dict()) - {f"blocks.{i}.attn.gate.proj.weight" for i in (0, 1)}
    assert not list(plain.blocks[0].attn.gate.parameters())
    ids = torch.randint(0, 300, (1, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (plain(ids).logits - gated(ids).logits).abs().max() > 1e-3


def test_gate_is_refused_outside_the_decoder():
    with pytest.raises(ConfigError, match="model.attention_gate is implemented for the decoder only"):
        load_config(overrides=["model.attention_gate=elementwise", "model.arch.name=mamba"], model_size="nano")
