"""`model.matmul`: which library multiplies the linear layers' float32 matrices on CPU.

torch     torch's own path (`F.linear` -> the BLAS torch was built with: MKL on x86). The default.
onednn    every `nn.Linear` of the model (projections, MLP, the LM head) runs its forward and both
          backward products through oneDNN's fp32 matmul (`torch.ops.mkldnn._linear_pointwise`).
auto      whichever of the two ran this model's products faster here, measured when the run starts
          (model/matmul_choice.py: a short probe at the model's own shapes and thread count; oneDNN must
          win by ONEDNN_MARGIN, else torch's path), recorded in the run and reused by a resume.

Why a measurement: MKL's sgemm picks its kernel by CPU vendor; on this project's AMD EPYC (Zen 5, AVX-512) it runs at
~108 GFLOP/s per thread at every shape of the quickstart model, oneDNN at 230-250 (forward, dL/dx) and
170-200 (dL/dW, which needs one transposed copy) (torch.profiler, one thread). The math is
the same IEEE float32 product (oneDNN's default fpmath mode, no bf16/tf32 down-conversion); the order of
the sums differs, so results differ from `torch` by float rounding only (~1e-7 relative per product).
That is why it is an option, off by default: a run's numbers stay what they were unless it asks.

The choice is made once when the model is built (`apply_matmul`): each `nn.Linear` is replaced by a
`OneDNNLinear` holding the very same Parameter objects, so state dicts, tied weights and checkpoints are
unchanged and interchangeable between the two settings. Anything the oneDNN path does not cover falls
back to `F.linear` call by call: non-CPU tensors, dtypes other than float32, and autocast (whose bf16
casts `F.linear` does itself).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from posbench.errors import ConfigError


def _mm(a_MK, b_NK):
    """a @ b^T in float32 by oneDNN; `b` may be a transposed view (oneDNN reads its strides), `a` is made
    contiguous (the kernel wants row-major rows)."""
    return torch.ops.mkldnn._linear_pointwise(a_MK, b_NK, None, "none", [], "")


class _OneDNNLinearFn(torch.autograd.Function):
    """y = x W^T (+ b) on 2-D x; backward: dL/dx = dy W, dL/dW = dy^T x, dL/db = sum of dy's rows."""

    @staticmethod
    def forward(x_MI, w_OI, b_O):
        y_MO = _mm(x_MI, w_OI)
        return y_MO if b_O is None else y_MO + b_O

    @staticmethod
    def setup_context(ctx, inputs, output):
        x_MI, w_OI, _ = inputs
        ctx.save_for_backward(x_MI, w_OI)

    @staticmethod
    def backward(ctx, dy_MO):
        x_MI, w_OI = ctx.saved_tensors
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _mm(dy_MO, w_OI.t())
        if ctx.needs_input_grad[1]:
            # dW = dy^T x needs one row-major transposed operand: transpose the narrower of the two
            # (x has I columns, dy O), measured 10-20% faster than always transposing dy
            if x_MI.shape[1] <= dy_MO.shape[1]:
                dw = _mm(x_MI.t().contiguous(), dy_MO.t()).t().contiguous()
            else:
                dw = _mm(dy_MO.t().contiguous(), x_MI.t())
        if ctx.needs_input_grad[2]:
            db = dy_MO.sum(0)
        return dx, dw, db


class OneDNNLinear(nn.Linear):
    """An `nn.Linear` whose float32 CPU products run in oneDNN (module docstring); same parameters, same
    state dict keys."""

    def forward(self, x):
        if x.device.type != "cpu" or x.dtype != torch.float32 or self.weight.dtype != torch.float32 \
                or torch.is_autocast_enabled("cpu"):
            return F.linear(x, self.weight, self.bias)
        y = _OneDNNLinearFn.apply(x.reshape(-1, self.in_features), self.weight, self.bias)
        return y.view(*x.shape[:-1], self.out_features)


def _onednn(model: nn.Module) -> nn.Module:
    if not torch.backends.mkldnn.is_available():
        raise ConfigError("model.matmul=onednn needs a torch built with oneDNN (mkldnn), which this one is not "
                          "(torch.backends.mkldnn.is_available() is False); use model.matmul=torch")
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:  # subclasses may override forward: left as they are
                swapped = OneDNNLinear.__new__(OneDNNLinear)
                swapped.__dict__ = child.__dict__  # the same Parameter objects (tied weights stay tied), hooks
                setattr(parent, name, swapped)
    return model


# a library -> what it does to a built model (written once: ModelConfig's Literal reads these keys and AUTO)
MATMULS: dict[str, Callable[[nn.Module], nn.Module]] = {
    "torch": lambda model: model,
    "onednn": _onednn,
}
AUTO = "auto"  # model.matmul's third value: one of MATMULS, chosen by measurement (model/matmul_choice.py)


def apply_matmul(model: nn.Module, matmul: str) -> nn.Module:
    """The model with its linear layers on `matmul` (a key of MATMULS; `auto` is resolved before this)."""
    return MATMULS[matmul](model)


def matmul_in(model: nn.Module) -> str:
    """Which library the model's linear layers run on, read from the layers themselves (what a result records)."""
    return "onednn" if any(type(m) is OneDNNLinear for m in model.modules()) else "torch"
