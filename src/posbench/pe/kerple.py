"""KERPLE (Chi et al. 2022, "Kernelized Relative Positional Embedding"), section 4.2: conditionally
positive definite kernels as logit biases, with learned per-head (and per-layer) r1, r2 > 0:
  log:   -r1 * log(1 + r2 * |i - j|)
  power: -r1 * |i - j|^r2,  0 < r2 <= 2
Parameters are clamped to their valid range in the forward pass, as in the paper's code."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from posbench.pe.bias import BiasConfig, BiasPE
from posbench.pe.encoding import PES

_EPS = 1e-2


class KerpleBase(BiasPE):
    # Initial ranges of the multiplier r1 and the inner parameter r2, as the authors' code draws them
    # (chijames/KERPLE, megatron/mpu/layers.py): log kernel -p*log(1 + a|m-n|) with p = rand*2, a = rand*1
    # (ParallelKerpleLog, lines 226-227); power kernel -a*|m-n|^p with exponent p = rand*2, multiplier
    # a = rand*1 (ParallelKerplePower, lines 326-327).
    r1_max: float = 2.0
    r2_max: float = 1.0

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.r1_LH = nn.Parameter(torch.rand(self.n_tables, ctx.n_heads) * self.r1_max)
        self.r2_LH = nn.Parameter(torch.rand(self.n_tables, ctx.n_heads) * self.r2_max)


@PES.register("kerple_log")
class KerpleLog(KerpleBase):
    summary = "KERPLE logarithmic kernel bias -r1*log(1 + r2*|i-j|), learned per head and layer"

    @dataclass
    class Config(BiasConfig):
        per_layer: bool = True

    def bias(self, t, h, dist, q_pos):
        r1 = self.r1_LH[t].clamp_min(_EPS)[h]
        r2 = self.r2_LH[t].clamp_min(_EPS)[h]
        return -r1 * torch.log1p(r2 * dist)


@PES.register("kerple_power")
class KerplePower(KerpleBase):
    summary = "KERPLE power kernel bias -r1*|i-j|^r2 (0 < r2 <= 2), learned per head and layer"
    r1_max, r2_max = 1.0, 2.0  # multiplier U(0, 1), exponent U(0, 2): the authors' ParallelKerplePower

    @dataclass
    class Config(BiasConfig):
        per_layer: bool = True

    def bias(self, t, h, dist, q_pos):
        r1 = self.r1_LH[t].clamp_min(_EPS)[h]
        r2 = self.r2_LH[t].clamp(_EPS, 2.0)[h]
        # 0^r2 has an undefined gradient w.r.t. r2 (0 * log 0); distance 0 contributes exactly 0
        powered = dist.clamp_min(1.0) ** r2
        return -r1 * torch.where(dist > 0, powered, torch.zeros_like(powered))
