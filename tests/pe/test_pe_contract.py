"""One contract, every registered PE: shapes, causality, gradients, shift (in)variance."""

import pytest
import torch

from posbench.errors import ConfigError
from posbench.model.kernels import EagerKernel, FlexKernel, SDPAKernel, select_kernel
from posbench.pe import PES, PositionRangeError
from tests.conftest import build_test_model

ALL_PES = PES.names()


def test_registry_is_complete():
    assert len(ALL_PES) >= 22


@pytest.mark.parametrize("name", ALL_PES)
def test_output_shapes(name):
    model = build_test_model(name).eval()
    idx = torch.randint(0, 61, (3, 17))
    logits = model(idx).logits
    assert logits.shape == (3, 17, 61)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("name", ALL_PES)
def test_causality(name):
    """Changing token t never changes the outputs at positions < t."""
    model = build_test_model(name).eval()
    idx = torch.randint(0, 61, (2, 20))
    changed = idx.clone()
    changed[:, 12:] = (changed[:, 12:] + 7) % 61
    with torch.no_grad():
        a, b = model(idx).logits, model(changed).logits
    torch.testing.assert_close(a[:, :12], b[:, :12], rtol=0, atol=1e-5)
    assert not torch.allclose(a[:, 12:], b[:, 12:])


@pytest.mark.parametrize("name", ALL_PES)
def test_gradients_reach_every_parameter(name):
    model = build_test_model(name).train()
    idx = torch.randint(0, 61, (4, 24))
    loss = model(idx[:, :-1], idx[:, 1:]).loss
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{pname} got no gradient"
        assert torch.isfinite(p.grad).all(), f"{pname} has a non-finite gradient"
        assert p.grad.abs().sum() > 0, f"{pname} has an all-zero gradient"


@pytest.mark.parametrize("name", ALL_PES)
def test_shift_invariance_matches_kind(name):
    """Relative PEs: identical logits when all positions shift by a constant; absolute: different."""
    model = build_test_model(name).eval()
    idx = torch.randint(0, 61, (2, 8))
    pos = torch.arange(8, dtype=torch.float32)
    shift = 40.0  # inside every table (seq_len 64) and past FIRE's test threshold (4)
    a = model.attention_scores(idx, pos)[0]
    b = model.attention_scores(idx, pos + shift)[0]
    mask = torch.isfinite(a)
    if model.pe.is_relative:
        torch.testing.assert_close(a[mask], b[mask], rtol=1e-4, atol=1e-4)
    else:
        assert (a[mask] - b[mask]).abs().max() > 1e-3


def test_model_refuses_inputs_longer_than_a_learned_table():
    model = build_test_model("learned").eval()  # table of seq_len = 64 positions
    model(torch.randint(0, 61, (1, 64)))
    with pytest.raises(PositionRangeError, match="defined for positions 0..63"):
        model(torch.randint(0, 61, (1, 65)))


@pytest.mark.parametrize("name", ALL_PES)
def test_the_kernel_the_model_selects_computes_what_another_kernel_does(name):
    """The model's own kernel choice (auto) against a different kernel that also applies the PE's bias: the
    eager reference where the model chose SDPA, FlexAttention (its unfused CPU forward, which applies the
    score_mod element by element) where the model chose eager or its no-grad SDPA form sdpa_bias, as every bias
    PE does on CPU. A PE whose bias the chosen kernel dropped differs here (attention_scores alone would not show
    it)."""
    model = build_test_model(name).eval()
    idx = torch.randint(0, 61, (2, 20))
    chosen_kernel = type(model.blocks[0].attn.kernel)
    other = FlexKernel if issubclass(chosen_kernel, EagerKernel) else EagerKernel
    if model.pe.has_logits_mod:  # CoPE: eager is its only kernel (tests/pe/test_pe_dynamic.py checks it by hand)
        assert chosen_kernel is EagerKernel and "logits_mod" in FlexKernel.supports(model.pe, "cuda", 0.0)
        return
    with torch.no_grad():
        chosen = model(idx).logits
        for layer, block in enumerate(model.blocks):
            block.attn.kernel = other(model.pe.layer_pe(layer), "cpu", 0.0)
        reference = model(idx).logits
    assert other is not chosen_kernel
    torch.testing.assert_close(chosen, reference, rtol=1e-4, atol=1e-4)


def test_a_pe_that_adds_a_bias_cannot_land_on_a_kernel_that_ignores_it():
    pe = build_test_model("rope").pe
    assert not pe.has_score_mod and isinstance(select_kernel("auto", pe, "cpu"), SDPAKernel)

    class BiasedRope(type(pe)):  # a new PE overriding score_mod and nothing else
        def score_mod(self, layer, pos_q_T, pos_k_S):
            return lambda score, b, h, q_idx, kv_idx: score + (q_idx - kv_idx) * -0.5

    pe.__class__ = BiasedRope
    assert pe.has_score_mod  # derived from the override, not declared
    assert isinstance(select_kernel("auto", pe, "cpu"), EagerKernel)
    with pytest.raises(ConfigError, match="adds a logit bias"):
        select_kernel("sdpa", pe, "cpu")
    q = k = v = torch.randn(1, 2, 4, 8)
    with pytest.raises(RuntimeError, match="sdpa kernel got a score_mod"):  # and called directly, it refuses
        SDPAKernel(pe, "cpu", 0.0)(q, k, v, pe.score_mod(0, torch.arange(4), torch.arange(4)), False)
