"""`model.dropout_masks`: which random generator draws the dropout masks of the model's `nn.Dropout` layers.

torch     torch's own dropout (`bernoulli_` on torch's generator). The default.
sfc64     each call draws one 64-bit seed from torch's generator and fills the mask from numpy's SFC64
          generator; everything else is torch's dropout: drop probability p (to 2^-32), kept values scaled by
          the same float32 1/(1 - p), the same mask applied to the gradient.

Why: on CPUs where torch does not use MKL's generator (AMD: torch picks it by CPU vendor) `bernoulli_` draws
two Mersenne-Twister numbers per element, one at a time: 0.58 ms for a (64, 16, 128) mask, 8% of the
quickstart model's step; SFC64 fills it in 0.13 ms and the mask is kept as bools (a quarter of the float
mask's memory). Measured 5% off the study step (docs/performance.md, "Faster quickstart").

The masks are other random draws than torch's, so a run's numbers change as with another dropout seed: an
option, off by default. The seed comes from torch's generator, so seeding, checkpointed RNG states and the
study snapshots' RNG restore cover it exactly as they cover torch's dropout. Non-CPU tensors keep torch's
dropout. Under torch.vmap (batched seeds) numpy cannot run: such a model fails the group's probe and its
cells train one by one (studies/cell.py says so in the log).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn


def keep_mask(shape: torch.Size, p: float) -> torch.Tensor:
    """A bool mask, True with probability 1 - p: one 32-bit SFC64 draw per element, read as a signed int,
    kept where >= round(p * 2^32) - 2^31 (the draws are uniform over all int32 values, so that is
    2^32 - round(p * 2^32) values of 2^32). The generator is seeded from torch's, one draw per call."""
    seed = int(torch.randint(0, 2**62, (1,)).item())
    n = int(np.prod(shape)) if len(shape) else 1
    draws = np.random.SFC64(seed).random_raw((n + 1) // 2).view(np.int32)[:n]
    return torch.from_numpy(draws).view(shape) >= int(round(p * 2**32)) - 2**31


class _MaskDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, keep, scale: float):
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return (x * keep).mul_(scale)

    @staticmethod
    def backward(ctx, g):
        (keep,) = ctx.saved_tensors
        return (g * keep).mul_(ctx.scale), None, None


class SFC64Dropout(nn.Dropout):
    """`nn.Dropout` with masks from SFC64 (module docstring); the same module otherwise."""

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or self.inplace:
            return super().forward(x)
        # torch's dropout scales by the float32 quotient 1 / (1 - p) (noise.div_(1 - p)): the same number here
        scale = torch.ones((), dtype=x.dtype).div_(1 - self.p).item()
        return _MaskDropout.apply(x, keep_mask(x.shape, self.p), scale)


def _sfc64(model: nn.Module) -> nn.Module:
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                swapped = SFC64Dropout.__new__(SFC64Dropout)
                swapped.__dict__ = child.__dict__  # p, inplace, training mode, hooks
                setattr(parent, name, swapped)
    return model


# model.dropout_masks -> what it does to a built model (written once: ModelConfig's Literal reads these keys)
DROPOUT_MASKS: dict[str, Callable[[nn.Module], nn.Module]] = {
    "torch": lambda model: model,
    "sfc64": _sfc64,
}


def apply_dropout_masks(model: nn.Module, choice: str) -> nn.Module:
    return DROPOUT_MASKS[choice](model)
