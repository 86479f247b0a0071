"""The logit-bias PEs of posbench's remote code (torch only): ALiBi, T5, clipped relative, KERPLE, FIRE.

Each implements `bias(t, h, dist, q_pos)` as posbench's BiasPE does: the bias of table `t` (one per layer with
`per_layer`) for head indices `h` (1,H,1,1), causal distances dist = q_pos - k_pos >= 0 (B,1,T,S) and query
positions q_pos (B,1,T,1), with elementwise tensor ops; `score_mod` adds it to the logits.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .pe_contract import PositionalEncoding, register


def row_of(pos_BT, b):
    """The row of a position tensor for batch index grid b: its only row when the positions are shared."""
    return b.clamp_max(pos_BT.shape[0] - 1)


class BiasPE(PositionalEncoding):
    options = frozenset(("per_layer",))

    @property
    def n_tables(self) -> int:
        return self.ctx.n_layers if self.cfg.get("per_layer") else 1

    def bias(self, t: int, h, dist, q_pos):
        raise NotImplementedError

    def score_mod(self, layer, pos_q_BT, pos_k_BS, feats_BHS=None):
        t = layer if self.n_tables > 1 else 0
        pos_q_BT, pos_k_BS = pos_q_BT.float(), pos_k_BS.float()

        def mod(score, b, h, q_idx, kv_idx):
            q_pos = pos_q_BT[row_of(pos_q_BT, b), q_idx]
            # future keys get distance 0: masked anyway, and log/pow stay finite there
            dist = (q_pos - pos_k_BS[row_of(pos_k_BS, b), kv_idx]).clamp_min(0.0)
            return score + self.bias(t, h, dist, q_pos)
        return mod


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Press et al. 2022: geometric slopes from 2^(-8/n); for n not a power of 2, the closest lower power
    p's slopes, then every other slope of 2p."""
    geometric = lambda n: [(2 ** (-8 / n)) ** (i + 1) for i in range(n)]
    p = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(p) + geometric(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes[:n_heads], dtype=torch.float32)


@register("alibi")
class ALiBi(BiasPE):
    def bias(self, t, h, dist, q_pos):
        return -alibi_slopes(self.ctx.n_heads).to(dist.device)[h] * dist


def t5_bucket(dist, num_buckets: int, max_distance: int):
    """T5's causal bucket: half exact, the rest log-spaced up to max_distance."""
    n = dist.long()
    max_exact = num_buckets // 2
    scaled = torch.log(n.clamp_min(max_exact).float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (scaled * (num_buckets - max_exact)).long()).clamp_max(num_buckets - 1)
    return torch.where(n < max_exact, n, large)


@register("t5")
class T5Bias(BiasPE):
    options = BiasPE.options | {"num_buckets", "max_distance"}

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.table_LNH = nn.Parameter(torch.zeros(self.n_tables, cfg["num_buckets"], ctx.n_heads))

    def bias(self, t, h, dist, q_pos):
        return self.table_LNH[t][t5_bucket(dist, self.cfg["num_buckets"], self.cfg["max_distance"]), h]


@register("relative_learned")
class ClippedBias(BiasPE):
    options = BiasPE.options | {"max_distance"}

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.table_LHN = nn.Parameter(torch.zeros(self.n_tables, ctx.n_heads, cfg["max_distance"] + 1))

    def bias(self, t, h, dist, q_pos):
        return self.table_LHN[t][h, dist.long().clamp_max(self.cfg["max_distance"])]


class Kerple(BiasPE):
    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.r1_LH = nn.Parameter(torch.zeros(self.n_tables, ctx.n_heads))
        self.r2_LH = nn.Parameter(torch.zeros(self.n_tables, ctx.n_heads))


@register("kerple_log")
class KerpleLog(Kerple):
    def bias(self, t, h, dist, q_pos):
        r1, r2 = self.r1_LH[t].clamp_min(1e-2)[h], self.r2_LH[t].clamp_min(1e-2)[h]
        return -r1 * torch.log1p(r2 * dist)


@register("kerple_power")
class KerplePower(Kerple):
    def bias(self, t, h, dist, q_pos):
        r1, r2 = self.r1_LH[t].clamp_min(1e-2)[h], self.r2_LH[t].clamp(1e-2, 2.0)[h]
        powered = dist.clamp_min(1.0) ** r2
        return -r1 * torch.where(dist > 0, powered, torch.zeros_like(powered))


@register("fire")
class FIRE(BiasPE):
    """Li et al. 2024: an MLP (1 -> hidden -> heads) of psi(i - j) / psi(max(L, i)), psi(x) = log(1 + c x)."""

    options = BiasPE.options | {"hidden", "c_init", "threshold_init"}  # the inits only shaped training

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        n, hdim, H = self.n_tables, cfg["hidden"], ctx.n_heads
        self.c_L = nn.Parameter(torch.zeros(n))
        self.threshold_L = nn.Parameter(torch.zeros(n))
        self.w1_LN = nn.Parameter(torch.zeros(n, hdim))
        self.b1_LN = nn.Parameter(torch.zeros(n, hdim))
        self.w2_LHN = nn.Parameter(torch.zeros(n, H, hdim))
        self.b2_LH = nn.Parameter(torch.zeros(n, H))

    def bias(self, t, h, dist, q_pos):
        c = self.c_L[t].clamp_min(1e-4)
        x = torch.log1p(c * dist) / torch.log1p(c * torch.maximum(q_pos, self.threshold_L[t]).clamp_min(1.0))
        hidden_BTSN = torch.relu(x[:, 0, ..., None] * self.w1_LN[t] + self.b1_LN[t])
        return self.b2_LH[t][:, None, None] + torch.einsum("btsn,hn->bhts", hidden_BTSN, self.w2_LHN[t])
