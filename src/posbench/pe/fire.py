"""FIRE (Li et al. 2024, "Functional Interpolation for Relative Positions Improves Long Context
Transformers", eq. 4-6): b(i, j) = f_theta( psi(i - j) / psi(max(L, i)) ), psi(x) = log(c x + 1),
f_theta an MLP 1 -> hidden -> heads, c and the threshold L learned. Normalising by the query
position makes it length-agnostic but *not* translation invariant once i > L."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from posbench.errors import ConfigError
from posbench.pe.bias import BiasConfig, BiasPE
from posbench.pe.encoding import PES
from posbench.pe.fire_speed import FIRESpeed


@PES.register("fire")
class FIRE(BiasPE):
    summary = "FIRE: MLP of log-normalised distance psi(i-j)/psi(max(L,i)), learned c and L"
    Speed = FIRESpeed  # its exact no-grad forms for the kernels (pe/fire_speed.py)

    @dataclass
    class Config(BiasConfig):
        hidden: int = 32
        # The authors' initial values (Li et al. 2024, sec. 3.2 / their implementation): c = 0.1, L = 512.
        # L: queries before L share one normaliser psi(L); later ones use their own position. Any
        # L >= 1 lets gradients reach it (with L = 0, max(L, i) never selects L).
        c_init: float = 0.1
        threshold_init: float = 512.0

        def check(self) -> None:
            if self.hidden < 1 or self.c_init <= 0 or self.threshold_init < 0:
                raise ConfigError("fire needs hidden >= 1, c_init > 0, threshold_init >= 0")

    @property
    def is_relative(self) -> bool:
        return False  # depends on the query position through psi(max(L, i))

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        n, hdim, H = self.n_tables, cfg.hidden, ctx.n_heads
        self.c_L = nn.Parameter(torch.full((n,), cfg.c_init))
        self.threshold_L = nn.Parameter(torch.full((n,), cfg.threshold_init))
        self.w1_LN = nn.Parameter(torch.randn(n, hdim))
        self.b1_LN = nn.Parameter(torch.randn(n, hdim) * 0.1)
        self.w2_LHN = nn.Parameter(torch.randn(n, H, hdim) / math.sqrt(hdim))
        self.b2_LH = nn.Parameter(torch.zeros(n, H))

    def bias(self, t, h, dist, q_pos):
        c = self.c_L[t].clamp_min(1e-4)
        psi = lambda x: torch.log1p(c * x)
        # max(L, i) >= 1 keeps the first query (i = 0) from dividing by psi(0) = 0
        x = psi(dist) / psi(torch.maximum(q_pos, self.threshold_L[t]).clamp_min(1.0))
        out = self.b2_LH[t][h]
        # the MLP unrolled over hidden units: elementwise ops only, so FlexAttention can fuse it
        for n in range(self.cfg.hidden):
            out = out + self.w2_LHN[t][h, n] * torch.relu(self.w1_LN[t, n] * x + self.b1_LN[t, n])
        return out
