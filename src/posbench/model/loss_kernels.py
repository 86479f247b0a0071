"""`model.kernels.loss`: who computes the LM head and its cross-entropy in training (model/library_kernels.py).

  torch       posbench's own (model/loss.py `head_loss`: chunked fused, or full logits by train.loss)
  liger_flce  Liger-Kernel's fused linear cross-entropy (Hsu et al. 2024; Triton, CUDA only)
  cce         cut-cross-entropy (Wijmans et al. 2024, "Cut Your Losses in Large-Vocabulary Language Models"): the
              loss from the logit of the target and a log-sum-exp computed blockwise in SRAM, the logits never in
              global memory (its Triton `cce` kernel on CUDA; on the CPU its own `torch_compile` form, which the
              tests compare with posbench's)

The library options give the loss only. A step that logs the logit statistics (logit_moments=True: one step in
train.log_interval) runs posbench's fused loss instead, which computes them on the way (model/loss.py); the loss
is the same function either way. Every option: mean over targets != -100, products in the autocast dtype, the
reduction in float32.
"""

from __future__ import annotations

import torch

from posbench.model.library_kernels import LibraryKernel
from posbench.model.loss import DEFAULT_CHUNK_TOKENS, _compute_dtype, head_loss
from posbench.model.output import ModelOutput
from posbench.registry import Registry
from posbench.targets import IGNORE

LOSS_KERNELS = Registry("loss kernel")


@LOSS_KERNELS.register("torch")
class TorchLoss(LibraryKernel):
    def __init__(self, device_type: str):
        self.device_type = device_type

    def __call__(self, h_BTD, weight_VD, targets_BT, chunk_tokens: int, lm_head=None, stats: bool = False):
        return head_loss(h_BTD, weight_VD, targets_BT, chunk_tokens, lm_head, stats)


class LibraryLoss(TorchLoss):
    """A library's fused loss on the flattened tokens; posbench's own where the logit moments are asked."""

    def __call__(self, h_BTD, weight_VD, targets_BT, chunk_tokens: int, lm_head=None, stats: bool = False):
        if stats:
            return head_loss(h_BTD, weight_VD, targets_BT, chunk_tokens or DEFAULT_CHUNK_TOKENS, lm_head, stats)
        dtype = _compute_dtype(h_BTD)
        with torch.autocast(h_BTD.device.type, enabled=False):
            loss = self.loss(h_BTD.flatten(0, 1).to(dtype), weight_VD.to(dtype), targets_BT.flatten())
        return ModelOutput(loss=loss.float())

    def loss(self, h_ND, w_VD, y_N) -> torch.Tensor:
        raise NotImplementedError


@LOSS_KERNELS.register("liger_flce")
class LigerFusedLinearCrossEntropy(LibraryLoss):
    packages = ("liger_kernel", "triton")
    devices = ("cuda",)

    def loss(self, h_ND, w_VD, y_N):
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        # accum_dtype float32: dL/dW summed over chunks in float32, as posbench's fused loss does
        return liger_fused_linear_cross_entropy(h_ND, w_VD, y_N, ignore_index=IGNORE, accum_dtype=torch.float32)


@LOSS_KERNELS.register("cce")
class CutCrossEntropy(LibraryLoss):
    packages = ("cut_cross_entropy", "triton")

    def loss(self, h_ND, w_VD, y_N):
        from cut_cross_entropy import linear_cross_entropy

        # filter_eps=None: no gradient entries below a threshold are skipped, so the gradient is the exact one
        # posbench's loss has; on the CPU the library's torch_compile form (its Triton kernel needs a GPU)
        if self.device_type == "cuda":
            return linear_cross_entropy(h_ND, w_VD, y_N, ignore_index=IGNORE, filter_eps=None, impl="cce")
        return linear_cross_entropy(h_ND, w_VD, y_N, ignore_index=IGNORE, impl="torch_compile")
