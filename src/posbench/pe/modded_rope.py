"""modded-nanogpt's half-truncated RoPE (KellerJordan/modded-nanogpt, the `Rotary` module of its speedrun records
since late 2024): of the F = K/2 frequency slots, the first K/4 hold (1/base)^linspace(0, 1, K/4), from 1 down
to 1/base with base 1024, and the other K/4 hold zero (the pair is never rotated: position-free channels, as
p-RoPE's). Same "rotate half" pairing as ours (channel j with j + K/2).

The records rotate by -angle (y1 = x1 cos + x2 sin) where we rotate by +angle: the logit then sees the relative
distance with the opposite sign, which a trained model absorbs by negating half of each pair's projection (the
two families are the same set of models); we keep one rotation convention for every rotary PE.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posbench.config_loader import require
from posbench.pe.encoding import PES
from posbench.pe.rope import RopeConfig, RotaryBase


def half_truncated_inv_freq(rotary_dim: int, base: float) -> torch.Tensor:
    """K/4 frequencies (1/base)^linspace(0, 1, K/4), then K/4 zeros: K/2 slots for K rotary channels."""
    quarter = rotary_dim // 4
    inv_F = (1.0 / base) ** torch.linspace(0, 1, steps=quarter, dtype=torch.float32)
    return torch.cat((inv_F, inv_F.new_zeros(quarter)))


@PES.register("modded_rope")
class ModdedNanoGPTRoPE(RotaryBase):
    summary = "modded-nanogpt's half-truncated RoPE: K/4 frequencies from 1 to 1/1024, K/4 at zero (position-free)"

    @dataclass
    class Config(RopeConfig):
        theta: float = 1024.0  # the lowest non-zero frequency is 1/theta (the records' base 1024)

    @classmethod
    def check_model(cls, cfg, ctx):
        super().check_model(cfg, ctx)
        R = int(ctx.head_dim * cfg.rotary_fraction)
        require(R % 4 == 0, f"`{cfg.name}` splits the {R} rotary channels into quarters (K/4 rotating frequencies, "
                            "K/4 zero): make the head dim (times pe.rotary_fraction) a multiple of 4")

    def initial_inv_freq(self):
        return half_truncated_inv_freq(self.rotary_dim, self.cfg.theta)
