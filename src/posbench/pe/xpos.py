"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer", eq. 8-9): RoPE plus a per-frequency
exponential decay, q_n scaled by zeta^(n/B) and k_m by zeta^(-m/B), so q.k gains zeta^((n-m)/B):
high frequencies decay fast, low ones barely, which damps oscillation at long range."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posbench.errors import ConfigError
from posbench.pe.encoding import PES
from posbench.pe.rope import RopeConfig, RotaryBase, apply_rotary


@PES.register("xpos")
class XPos(RotaryBase):
    summary = "xPos: RoPE with exponential decay per frequency (relative, length-extrapolatable)"

    @dataclass
    class Config(RopeConfig):
        gamma: float = 0.4  # zeta_i = (2i/K + gamma) / (1 + gamma)
        scale_base: float = 512.0  # B

        def check(self) -> None:
            super().check()
            if not (self.gamma > 0 and self.scale_base > 0):
                raise ConfigError("pe.gamma and pe.scale_base must be > 0")

    def rotate_rotary(self, q_BHTK, k_BHTK, pos_T):
        cos_TK, sin_TK = self.cos_sin(pos_T)
        K = self.rotary_dim
        zeta_F = (torch.arange(0, K, 2, device=pos_T.device, dtype=torch.float32) / K + self.cfg.gamma) \
            / (1 + self.cfg.gamma)
        # zeta^(p/B) in float32: exact relative decay up to ~30k positions before float32 underflows
        scale_TF = zeta_F[None, :] ** (pos_T.float()[..., None] / self.cfg.scale_base)
        scale_TK = torch.cat((scale_TF, scale_TF), dim=-1)
        if scale_TK.dim() == 3:  # per-row positions (B, T): broadcast over heads as cos_sin does
            scale_TK = scale_TK[:, None]
        return (apply_rotary(q_BHTK, cos_TK * scale_TK, sin_TK * scale_TK),
                apply_rotary(k_BHTK, cos_TK / scale_TK, sin_TK / scale_TK))
