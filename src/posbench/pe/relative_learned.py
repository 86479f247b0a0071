"""A learned scalar bias per head and clipped distance (Shaw et al. 2018's clipping, as a logit
bias): the "relative" option of the learned-PE notes. Distances >= max_distance share one value."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch
from torch import nn

from posbench.errors import ConfigError
from posbench.pe.bias import BiasConfig, BiasPE
from posbench.pe.bias_speed import BiasSpeed
from posbench.pe.encoding import PES
from posbench.pe.fast_bias import FarField


@PES.register("relative_learned")
class RelativeLearnedBias(BiasPE):
    summary = "Learned bias per head and clipped distance min(i-j, max_distance)"

    @dataclass
    class Config(BiasConfig):
        max_distance: int = 128

        def check(self) -> None:
            if self.max_distance < 1:
                raise ConfigError(f"pe.max_distance must be >= 1, got {self.max_distance}")

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.table_LHN = nn.Parameter(torch.zeros(self.n_tables, ctx.n_heads, cfg.max_distance + 1))

    def bias(self, t, h, dist, q_pos):
        return self.table_LHN[t][h, dist.long().clamp_max(self.cfg.max_distance)]

    class Speed(BiasSpeed):
        def fast_bias(self, layer, pos_q_T, pos_k_S):
            return dataclasses.replace(super().fast_bias(layer, pos_q_T, pos_k_S),
                                       far_field=functools.partial(self.far_field, self.pe.table_index(layer)))

        def far_field(self, t, H):
            D = self.pe.cfg.max_distance
            intercept_H = self.pe.table_LHN[t][:, D].detach().float()  # the clipped distance's value
            return FarField(D, torch.zeros_like(intercept_H), intercept_H)
