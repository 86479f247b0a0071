"""model.qk_norm_weight and model.qk_norm_layers (Llama 4's L2 QK-norm: no learned scale, RoPE layers only): the norm
by hand, which layers get it, normalising before RoPE equal to after it, and the defaults' weighted norm everywhere."""

import pytest
import torch
from torch import nn

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.model.build import build_model
from posbench.model.norms import RMSNorm, UnitRMSNorm
from posbench.pe import PES


def test_unit_rms_norm_by_hand():
    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(0))
    want = x.double() / (x.double().pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    assert (UnitRMSNorm(16, 1e-6)(x).double() - want).abs().max() < 1e-6
    assert not list(UnitRMSNorm(16).parameters())


def test_normalising_before_rope_equals_after_it():
    pe = PES.build(PES.get("rope").Config(), load_config(model_size="nano").model.pe_context())
    q = torch.randn(2, 4, 12, 16, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(12.0)
    norm = UnitRMSNorm(16, 1e-6)
    before, _ = pe.rotate(norm(q), norm(q), pos)
    after, _ = pe.rotate(q, q, pos)
    assert (before - norm(after)).abs().max() < 1e-5


def test_positional_layers_only_and_weightless():
    cfg = load_config(overrides=["pe.name=hybrid", "model.n_layers=4", "model.qk_norm_weight=false",
                                 "model.qk_norm_layers=positional"], model_size="nano")
    model = build_model(cfg.model, cfg.pe, "cpu")
    kinds = [type(b.attn.q_norm) for b in model.blocks]
    assert kinds == [UnitRMSNorm, UnitRMSNorm, UnitRMSNorm, nn.Identity]  # the 4th layer is NoPE
    default = build_model(load_config(model_size="nano").model, load_config(model_size="nano").pe, "cpu")
    assert all(type(b.attn.q_norm) is RMSNorm for b in default.blocks)


def test_refused_outside_the_decoder():
    with pytest.raises(ConfigError, match="model.qk_norm_weight is implemented for the decoder only"):
        load_config(overrides=["model.qk_norm_weight=false", "model.arch.name=encoder_decoder"], model_size="nano")
