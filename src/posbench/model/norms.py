"""RMSNorm (Zhang & Sennrich 2019), computed in float32 so it is safe under bf16 autocast."""

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            # float32 in and out: torch's rms_norm runs the very ops below in the same order (square, mean, + eps,
            # rsqrt, two products), so values and gradients are bit-equal (tests/model/test_norms.py), with a fused
            # backward: 35% less CPU for a (64, 16, 128) norm's forward + backward (docs/performance.md)
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)
