"""RMSNorm (Zhang & Sennrich 2019), computed in float32 so it is safe under bf16 autocast; `NORMS` holds the
implementations `model.kernels.norm` chooses between (model/library_kernels.py): posbench's torch form, the
reference, and Liger-Kernel's fused Triton kernel. Same parameter (`weight`), so checkpoints are interchangeable."""

import torch
from torch import nn

from posbench.model.library_kernels import LibraryKernel
from posbench.registry import Registry

NORMS = Registry("norm kernel")


@NORMS.register("torch")
class RMSNorm(nn.Module, LibraryKernel):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


@NORMS.register("liger")
class LigerRMSNorm(RMSNorm):
    """Liger-Kernel's RMSNorm: one Triton kernel each way. casting_mode "gemma": x, the rms and the weight product in
    float32, the result cast to x's dtype, as `RMSNorm.forward` does (offset 0: the weight as stored)."""

    packages = ("liger_kernel", "triton")
    devices = ("cuda",)

    def forward(self, x):
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        return LigerRMSNormFunction.apply(x, self.weight, self.eps, 0.0, "gemma", False)


class UnitRMSNorm(nn.Module):
    """RMSNorm without a learned scale: x / rms(x) (Llama 4's L2Norm of q and k), in float32 like RMSNorm."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
