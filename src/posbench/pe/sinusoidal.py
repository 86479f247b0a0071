"""Fixed sinusoidal tables (Vaswani et al. 2017, section 3.5) and a sine-only ablation."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posbench.config_loader import require
from posbench.pe.absolute import FixedTablePE, TableConfig
from posbench.pe.encoding import PES


def sinusoidal_table(pos_T: torch.Tensor, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(p / base^(2i/d)); float32 (T, d), or (B, T, d) for
    per-row positions."""
    i = torch.arange(0, d_model, 2, device=pos_T.device, dtype=torch.float32)
    angle_TF = pos_T.float()[..., None] * base ** (-i / d_model)[None, :]
    out = torch.empty(*pos_T.shape, d_model, device=pos_T.device, dtype=torch.float32)
    out[..., 0::2] = torch.sin(angle_TF)
    out[..., 1::2] = torch.cos(angle_TF)
    return out


class UnitWaveTable(FixedTablePE):
    def default_scale(self) -> float:
        # Vaswani et al. multiply token embeddings by sqrt(d_model) so they are as loud as the table
        # (section 3.4). With GPT-2 style embeddings (std init_std) we scale the table instead, to a
        # per-channel RMS of init_std (a sine's RMS is 1/sqrt(2)). Unscaled, a table of RMS 0.7
        # drowns tokens of std 0.02 and small models stay at chance on token-identity tasks.
        return self.ctx.init_std * math.sqrt(2)


@PES.register("sinusoidal")
class SinusoidalPE(UnitWaveTable):
    summary = "Fixed sin/cos table added to embeddings (Vaswani et al. 2017)"

    @dataclass
    class Config(TableConfig):
        base: float = 10000.0

    @classmethod
    def check_model(cls, cfg, ctx):
        # sin and cos come in pairs per frequency (DESIGN: odd d_model is a config error)
        require(ctx.d_model % 2 == 0, f"`{cfg.name}` needs an even model.d_model, got {ctx.d_model}")

    def table(self, pos_T):
        return sinusoidal_table(pos_T, self.ctx.d_model, self.cfg.base)


@PES.register("sinonly")
class SineOnlyPE(UnitWaveTable):
    summary = "Sine-only table: PE[p, i] = sin(p / base^(i/d)); no cosine partner per frequency"

    @dataclass
    class Config(TableConfig):
        base: float = 10000.0

    def table(self, pos_T):
        d = self.ctx.d_model
        i = torch.arange(d, device=pos_T.device, dtype=torch.float32)
        # Without the cosine partner, p -> PE[p] is no longer a rotation, so PE[p+k] is not a linear
        # function of PE[p]: the ablation tests whether that property matters.
        return torch.sin(pos_T.float()[..., None] * self.cfg.base ** (-i / d)[None, :])
