"""RNoPE-SWA: RoPE in sliding-window layers, NoPE in full-attention layers (Yang et al. 2025, arXiv 2501.18795)."""

import pytest
import torch

from posbench.errors import ConfigError
from posbench.pe.none import NoPE
from posbench.pe.rope import RoPE
from tests.conftest import build_test_model


@pytest.mark.parametrize("window", ["null", "1000000"])
def test_an_infinite_window_is_the_hybrid_with_the_same_rope_none_pattern(window):
    """Degenerate case: no window binds, so the layers are hybrid's default [rope, rope, rope, none]."""
    swa = build_test_model("rnope_swa", overrides=[f"pe.window={window}"]).eval()
    hybrid = build_test_model("hybrid").eval()  # same seed: same weights
    assert [type(hybrid.pe.layer_pe(i)) for i in range(4)] == [RoPE, RoPE, RoPE, NoPE]
    hybrid.load_state_dict(swa.state_dict())
    idx = torch.randint(0, 61, (2, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(swa(idx).logits, hybrid(idx).logits)


def test_rope_layers_are_windowed_and_nope_layers_see_everything():
    model = build_test_model("rnope_swa", overrides=["pe.window=5"], n_layers=8)
    assert [b.attn.kernel.window for b in model.blocks] == [5, 5, 5, None] * 2
    assert [type(model.pe.layer_pe(i)) for i in range(8)] == [RoPE, RoPE, RoPE, NoPE] * 2
    ratio = build_test_model("rnope_swa", overrides=["pe.window=5", "pe.swa_layers=1"])
    assert [b.attn.kernel.window for b in ratio.blocks] == [5, None, 5, None]
    # and the window is real: beyond it the model differs from the full-attention hybrid
    hybrid = build_test_model("hybrid").eval()
    short = build_test_model("rnope_swa", overrides=["pe.window=5"]).eval()
    hybrid.load_state_dict(short.state_dict())
    idx = torch.randint(0, 61, (1, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (short(idx).logits - hybrid(idx).logits).abs().amax(-1)[0]
    assert diff[:5].max() <= 1e-6 < diff[5:].max()  # equal while every key is inside the window


def test_the_cycle_must_fit_the_model_and_the_window_be_positive():
    with pytest.raises(ConfigError, match="lower pe.swa_layers"):
        build_test_model("rnope_swa", n_layers=3)
    with pytest.raises(ConfigError, match="pe.window must be >= 1"):
        build_test_model("rnope_swa", overrides=["pe.window=0"])
