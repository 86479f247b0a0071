"""T5 relative position bias (Raffel et al. 2020, section 2.1): a learned scalar per head and
distance bucket; exact buckets for short distances, log-spaced up to max_distance, causal."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import torch
from torch import nn

from posbench.errors import ConfigError
from posbench.pe.bias import BiasConfig, BiasPE
from posbench.pe.bias_speed import BiasSpeed
from posbench.pe.encoding import PES
from posbench.pe.fast_bias import FarField


def t5_bucket(dist: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """Causal (unidirectional) bucket of distance i - j >= 0, as in T5's `_relative_position_bucket`
    with bidirectional=False: half the buckets are exact, the rest log-spaced to max_distance."""
    n = dist.long()
    max_exact = num_buckets // 2
    # log of n >= max_exact only matters where the result is used; clamp keeps log finite elsewhere
    scaled = torch.log(n.clamp_min(max_exact).float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (scaled * (num_buckets - max_exact)).long()).clamp_max(num_buckets - 1)
    return torch.where(n < max_exact, n, large)


@PES.register("t5")
class T5Bias(BiasPE):
    summary = "T5 learned relative bias over causal log-spaced distance buckets (shared by layers)"

    @dataclass
    class Config(BiasConfig):
        num_buckets: int = 32
        max_distance: int = 128

        def check(self) -> None:
            if self.num_buckets < 4 or self.max_distance <= self.num_buckets // 2:
                raise ConfigError("t5 needs num_buckets >= 4 and max_distance > num_buckets/2, got "
                                  f"{self.num_buckets}, {self.max_distance}")

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        # zero init: the model starts as NoPE and learns the bias it needs
        self.table_LNH = nn.Parameter(torch.zeros(self.n_tables, cfg.num_buckets, ctx.n_heads))

    def bias(self, t, h, dist, q_pos):
        return self.table_LNH[t][t5_bucket(dist, self.cfg.num_buckets, self.cfg.max_distance), h]

    class Speed(BiasSpeed):
        def fast_bias(self, layer, pos_q_T, pos_k_S):
            return dataclasses.replace(super().fast_bias(layer, pos_q_T, pos_k_S),
                                       far_field=functools.partial(self.far_field, self.pe.table_index(layer)))

        def far_field(self, t, H):
            # every distance from the last bucket's first on reads that bucket (buckets grow with the distance)
            cfg = self.pe.cfg
            last = cfg.num_buckets - 1
            buckets = t5_bucket(torch.arange(cfg.max_distance + 1), cfg.num_buckets, cfg.max_distance)
            start = int((buckets == last).nonzero()[0])
            intercept_H = self.pe.table_LNH[t][last].detach().float()
            return FarField(start, torch.zeros_like(intercept_H), intercept_H)
