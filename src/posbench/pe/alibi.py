"""ALiBi (Press et al. 2022, "Train Short, Test Long"): bias -m_h * (i - j) with fixed head slopes."""

from __future__ import annotations

import dataclasses
import math

import torch

from posbench.pe.bias import BiasPE
from posbench.pe.bias_speed import BiasSpeed
from posbench.pe.encoding import PES
from posbench.pe.fast_bias import FarField


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Geometric slopes starting at 2^(-8/n) with that ratio (section 3). For n not a power of 2
    the paper's code takes the slopes of the closest lower power of 2, p, then every other slope of
    2p for the remaining n - p heads."""

    def power_of_2(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    p = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_2(p)
    if p < n_heads:
        slopes += power_of_2(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


@PES.register("alibi")
class ALiBi(BiasPE):
    summary = "ALiBi: fixed per-head linear distance penalty on attention logits (Press et al. 2022)"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.register_buffer("slopes_H", alibi_slopes(ctx.n_heads), persistent=False)

    def bias(self, t, h, dist, q_pos):
        return -self.slopes_H[h] * dist

    class Speed(BiasSpeed):
        def fast_bias(self, layer, pos_q_T, pos_k_S):
            # its slopes let flash-attn's fused ALiBi run it; -m d is affine at every distance: a far field from 0
            return dataclasses.replace(super().fast_bias(layer, pos_q_T, pos_k_S), far_field=self.far_field,
                                       alibi_slopes=self.pe.slopes_H)

        def far_field(self, H):
            return FarField(0, -self.pe.slopes_H, torch.zeros_like(self.pe.slopes_H))
