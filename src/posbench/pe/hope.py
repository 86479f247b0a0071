"""HoPE, High-frequency rotary Position Encoding (Chen et al., ACL 2025, arXiv 2410.21216, section 4): RoPE keeps
only the components that complete at least one full period within the training length L, theta_i >= 2 pi / L;
every lower-frequency component (the ones the paper finds learning the U-shaped, long-term-decay pattern and a
shortcut that breaks extrapolation) is replaced by a position-independent one: zero frequency, the pair is not
rotated. Which components rotate is fixed at construction from the model's training length (`model.seq_len`).
"""

from __future__ import annotations

import math

import torch

from posbench.pe.encoding import PES
from posbench.pe.rope import RotaryBase


def high_frequency_inv_freq(inv_F: torch.Tensor, train_len: int) -> torch.Tensor:
    """inv_F with every frequency whose period 2 pi / theta exceeds `train_len` set to zero."""
    return torch.where(inv_F * train_len >= 2 * math.pi, inv_F, torch.zeros_like(inv_F))


@PES.register("hope")
class HoPE(RotaryBase):
    summary = "HoPE: RoPE keeping only frequencies with a full period within the training length; rest position-free"

    def initial_inv_freq(self):
        return high_frequency_inv_freq(super().initial_inv_freq(), self.ctx.seq_len)
