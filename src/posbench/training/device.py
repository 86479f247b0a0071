"""The device a run or an evaluation uses: `auto` is CUDA when a device is visible, else CPU; asking for CUDA
without one is refused before any work, with the caller's own advice."""

from __future__ import annotations

import torch

from posbench.config import RunConfig
from posbench.config_loader import ConfigError


def pick_device(requested: str, refusal: str) -> str:
    """`requested` (auto | cpu | cuda | cuda:N ...) resolved; ConfigError(refusal) for cuda without a GPU."""
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError(refusal)
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def device_type_for(cfg: RunConfig) -> str:
    return pick_device(cfg.train.device, "train.device=cuda but no CUDA device is visible")
