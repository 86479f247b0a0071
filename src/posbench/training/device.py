"""Where and in what precision the math runs: the device (`auto` is CUDA when one is visible, else CPU; asking
for CUDA without one is refused before any work, with the caller's own advice), and the numeric precision of
the training step, one small class each (no flags in the loop):

  fp32  plain float32 (CPU default)
  bf16  autocast to bfloat16 (CUDA default when supported); no loss scaling needed
  fp16  autocast to float16 with a GradScaler, for GPUs without bf16
"""

from __future__ import annotations

import contextlib

import torch

from posbench.config import RunConfig
from posbench.errors import ConfigError


def pick_device(requested: str, refusal: str) -> str:
    """`requested` (auto | cpu | cuda | cuda:N ...) resolved; ConfigError(refusal) for cuda without a GPU."""
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError(refusal)
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def device_name(device: torch.device) -> str:
    """What a result says it ran on: "cpu", or the GPU's name (e.g. "cuda: NVIDIA H100 80GB HBM3")."""
    return f"cuda: {torch.cuda.get_device_name(device)}" if device.type == "cuda" else device.type


def device_type_for(cfg: RunConfig) -> str:
    return pick_device(cfg.train.device, "train.device=cuda but no CUDA device is visible")


class FP32:
    name = "fp32"

    def __init__(self, device_type: str):
        self.device_type = device_type

    def autocast(self):
        return contextlib.nullcontext()

    def backward(self, loss):
        loss.backward()

    def unscale(self, optimizer):
        pass

    def step(self, optimizer):
        optimizer.step()


class BF16(FP32):
    name = "bf16"

    def autocast(self):
        return torch.autocast(self.device_type, dtype=torch.bfloat16)


class FP16(FP32):
    name = "fp16"

    def __init__(self, device_type: str):
        super().__init__(device_type)
        self.scaler = torch.amp.GradScaler(device_type)

    def autocast(self):
        return torch.autocast(self.device_type, dtype=torch.float16)

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def unscale(self, optimizer):
        self.scaler.unscale_(optimizer)  # so clipping and the finite check see true gradients

    def step(self, optimizer):
        self.scaler.step(optimizer)
        self.scaler.update()


PRECISIONS = {cls.name: cls for cls in (FP32, BF16, FP16)}


def choose_precision(requested: str, device_type: str):
    if requested == "auto":
        if device_type != "cuda":
            requested = "fp32"
        else:
            requested = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return PRECISIONS[requested](device_type)
