"""FIRE (Li et al. 2024, "Functional Interpolation for Relative Positions Improves Long Context
Transformers", eq. 4-6): b(i, j) = f_theta( psi(i - j) / psi(max(L, i)) ), psi(x) = log(c x + 1),
f_theta an MLP 1 -> hidden -> heads, c and the threshold L learned. Normalising by the query
position makes it length-agnostic but *not* translation invariant once i > L."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from posbench.config_loader import ConfigError
from posbench.pe.bias import BiasConfig, BiasPE
from posbench.pe.encoding import PES


@PES.register("fire")
class FIRE(BiasPE):
    summary = "FIRE: MLP of log-normalised distance psi(i-j)/psi(max(L,i)), learned c and L"

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

    def _normaliser(self, t, q_pos):
        """c and psi(max(L, i)) by `bias`'s own ops (so the fast path's x is `bias`'s to the bit)."""
        c = self.c_L[t].clamp_min(1e-4)
        return c, torch.log1p(c * torch.maximum(q_pos, self.threshold_L[t]).clamp_min(1.0))

    def invariant_rows(self, t, pos_q_T):
        # queries at i <= max(L, 1) share the normaliser psi(max(L, 1)): their bias is one of distance alone
        bound = self.threshold_L[t].clamp_min(1.0)
        return int((pos_q_T <= bound).sum())

    def piecewise(self, t):
        """The MLP as the piecewise-linear function it is: f(x) = slope_HP[h, s] x + intercept_HP[h, s] on
        segment s = bucketize(x, breaks_P) (breaks[s-1] < x <= breaks[s]). A unit with w1 != 0 switches at
        x_n = -b1/w1: one with w1 > 0 is on right of it, w1 < 0 left of it; w1 = 0 units are constants.
        Counting by the sorted rank of a unit's break (not by comparing values) keeps duplicated breaks right:
        the zero-width segments between equal breaks are never picked by bucketize. Float64 inside."""
        w1, b1 = self.w1_LN[t].double(), self.b1_LN[t].double()
        w2_HN, b2_H = self.w2_LHN[t].double(), self.b2_LH[t].double()
        on = w1 != 0
        breaks, order = (-b1[on] / w1[on]).sort()
        P = breaks.numel()
        rank = torch.empty_like(order)
        rank[order] = torch.arange(P, device=order.device)
        seg = torch.arange(P + 1, device=order.device)[None, :]
        right = (w1[on] > 0)[:, None] & (rank[:, None] < seg)  # (P, P+1): unit n is on in segment s
        left = (w1[on] < 0)[:, None] & (rank[:, None] >= seg)
        active = (right | left).double()
        slope_HP = w2_HN[:, on] @ (active * w1[on][:, None])
        intercept_HP = (b2_H + w2_HN[:, ~on] @ torch.relu(b1[~on]))[:, None] + w2_HN[:, on] @ (active * b1[on][:, None])
        return breaks.float(), slope_HP.float(), intercept_HP.float()

    def rows_bias(self, t, pos_q_T, pos_k_S, H):
        """Rows last to first (BiasPE.rows_bias): x as in `bias`, shared by the heads, then f(x) as slope and
        intercept of x's segment: a bucketize and two gathers instead of `hidden` elementwise passes per head."""
        breaks, slope_HP, intercept_HP = self.piecewise(t)
        c, norm_T = self._normaliser(t, pos_q_T.float())
        pos_q_T, pos_k_S = pos_q_T.float(), pos_k_S.float()

        def block(q0, q1, k0, k1):
            dist_RN = (pos_q_T[q0:q1].flip(0)[:, None] - pos_k_S[None, k0:k1]).clamp_min(0.0)
            x_RN = torch.log1p(c * dist_RN) / norm_T[q0:q1].flip(0)[:, None]
            s_RN = torch.bucketize(x_RN, breaks)
            return slope_HP[:, s_RN] * x_RN + intercept_HP[:, s_RN]

        return block
