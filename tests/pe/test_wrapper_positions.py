"""A wrapper that sets the inner PE's positions (randomized draws, RFS floats, coupled ids) builds it with
PEContext.token_distances False (pe/wrapper.py `sets_positions`), and flash_alibi, which applies ALiBi at token
distances and sees no positions, refuses such an ALiBi at construction; `auto` and sdpa_bias run it at its
positions."""

import pytest
import torch

from posbench.errors import ConfigError
from posbench.model.kernels import FlashAlibiKernel, select_kernel
from posbench.pe import PES
from posbench.pe.wrapper import WrapperPE
from tests.conftest import build_test_model

WRAPPED_ALIBI = {
    "randomized": ["pe.inner.name=alibi"],
    "randomized_float": ["pe.inner.name=alibi", "pe.positions=float"],
    "randomized_dense_at_eval": ["pe.inner.name=alibi", "pe.sample_at_eval=false"],  # training still draws
    "coupled": ["pe.inner.name=alibi"],
}


def wrapped(case: str):
    return build_test_model(case.split("_")[0], overrides=WRAPPED_ALIBI[case])


def test_which_wrappers_set_positions():
    """Derived from the position hooks each registered wrapper overrides: randomized and coupled do."""
    wrappers = {name: cls.sets_positions() for name, cls in PES.classes().items() if issubclass(cls, WrapperPE)}
    assert wrappers == {"randomized": True, "coupled": True}


@pytest.mark.parametrize("case", list(WRAPPED_ALIBI))
def test_flash_alibi_refuses_alibi_at_a_wrappers_positions(case):
    pe = wrapped(case).pe.layer_pe(0)
    assert pe.name == "alibi" and not pe.ctx.token_distances
    with pytest.raises(ConfigError, match=r"model.attention=flash_alibi cannot run PE `alibi` on cuda: ALiBi's "
                                          r"positions are set by a wrapper .* use model.attention=auto or sdpa_bias"):
        select_kernel("flash_alibi", pe, "cuda")


def test_plain_alibi_is_not_refused_for_its_positions():
    pe = build_test_model("alibi").pe.layer_pe(0)
    assert pe.ctx.token_distances
    reason = FlashAlibiKernel.supports(pe, "cuda", 0.0)
    assert reason is None or "flash-attn is not installed" in reason


@pytest.mark.parametrize("case", ["randomized", "randomized_float"])
def test_auto_runs_the_wrapped_alibi_at_its_positions(case):
    """The refused pairing has a working one: auto (sdpa_bias on CPU) equals the eager reference at the drawn
    positions, which are not the token indices."""
    model = wrapped(case).eval()
    idx = torch.randint(0, 61, (2, 20), generator=torch.Generator().manual_seed(0))
    assert not torch.equal(model.pe.positions(20, "cpu"), torch.arange(20.0))
    with torch.no_grad():
        auto = model(idx).logits
        for block in model.blocks:
            block.attn.kernel = select_kernel("eager", block.attn.kernel.pe, "cpu")
        torch.testing.assert_close(auto, model(idx).logits, rtol=1e-5, atol=1e-5)
