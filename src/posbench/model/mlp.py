"""SwiGLU feed-forward (Shazeer 2020, "GLU Variants Improve Transformer", eq. 6): three matrices,
d_ff is the hidden width (the presets' d_ff counts as given, no 2/3 rescaling). `MLPS` holds the implementations
`model.kernels.mlp` chooses between (model/library_kernels.py): torch's, the reference, and Liger-Kernel's fused
silu(gate) * up. Same three linear layers, so checkpoints are interchangeable."""

import torch.nn.functional as F
from torch import nn

from posbench.model.library_kernels import LibraryKernel
from posbench.registry import Registry

MLPS = Registry("mlp kernel")


@MLPS.register("torch")
class SwiGLU(nn.Module, LibraryKernel):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x_BTD):
        return self.dropout(self.down(self.product(self.gate(x_BTD), self.up(x_BTD))))

    def product(self, gate_BTF, up_BTF):
        return F.silu(gate_BTF) * up_BTF


@MLPS.register("liger")
class LigerSwiGLU(SwiGLU):
    """silu(gate) * up in one Triton kernel each way (Liger-Kernel's LigerSiLUMulFunction), which recomputes silu in
    backward instead of keeping it: one (B, T, d_ff) activation less per layer."""

    packages = ("liger_kernel", "triton")
    devices = ("cuda",)

    def product(self, gate_BTF, up_BTF):
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction

        return LigerSiLUMulFunction.apply(gate_BTF, up_BTF)
