"""CoPE, contextual position encoding (Golovneva et al. 2024, arXiv 2405.18719): positions count the keys a
query's gates open, not tokens. For query i and key j (per head):

    g_ij = sigmoid(q_i . k_j / sqrt(K))          gates from the scaled attention logits (masked keys: 0)
    p_ij = sum_{t=j}^{i} g_it                     clamped to npos_max - 1
    e[p] = (ceil(p) - p) e[floor(p)] + (p - floor(p)) e[ceil(p)]   integer embeddings, interpolated
    logit_ij = (q_i . k_j + q_i . e[p_ij]) / sqrt(K)

Defaults from the authors' code (facebookresearch/RAM, projects/cope/src/cope/context_position.py): npos_max =
block size + 1 (position 0 is possible), one table of npos_max head-dim vectors per layer shared by its heads
(`--cope-shared` shares it across layers: pe.shared), initialised to zeros, interpolated as q . e[floor] and
q . e[ceil] (the two products are what is interpolated, which equals q . e[p]).

p_ij sums over the whole row, so CoPE cannot be a FlexAttention score_mod: it rewrites the masked logit matrix
(`logits_mod`), which only the eager kernel runs. Shape legend: B batch, H heads, T queries, S keys, K head dim,
N npos_max.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PEConfig, PositionalEncoding
from posbench.pe.speed import PESpeed

MAX_NPOS = 1 << 20  # a 1M-entry table: 256 MiB per layer at head_dim 64; 1e9 asked for 128 GB


@PES.register("cope")
class CoPE(PositionalEncoding):
    kind = "context"
    summary = "CoPE: positions count the keys whose gates sigmoid(q.k) open; interpolated embeddings (eager only)"

    @dataclass
    class Config(PEConfig):
        npos_max: int | None = None  # None: model.seq_len + 1, the authors' default (block size + 1)
        shared: bool = False  # one table for every layer (the authors' --cope-shared); default one per layer

        def check(self) -> None:
            if self.npos_max is not None and self.npos_max < 2:
                raise ConfigError(f"pe.npos_max must be >= 2 (positions 0 and 1 at least), got {self.npos_max}")
            if self.npos_max is not None and self.npos_max > MAX_NPOS:
                raise ConfigError(f"pe.npos_max={self.npos_max:,} is beyond {MAX_NPOS:,}: its tables (npos_max x "
                                  "head_dim floats per layer) would not fit in memory; give at most the longest "
                                  "context you evaluate + 1")

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        n_tables = 1 if cfg.shared else ctx.n_layers
        self.table_LKN = nn.Parameter(torch.zeros(n_tables, ctx.head_dim, self.npos_max))

    @property
    def npos_max(self) -> int:
        return self.cfg.npos_max or self.ctx.seq_len + 1

    def logits_mod(self, layer, q_BHTK, s_BHTS, k_BHSK=None, feats_BHS=None):
        e_KN = self.table_LKN[0 if self.cfg.shared else layer].float()
        gates_BHTS = torch.sigmoid(s_BHTS)  # -inf (future, other documents) -> 0: those keys count nothing
        # p_ij = sum over t >= j of g_it: a cumulative sum from the right (keys after the query have g = 0)
        p_BHTS = gates_BHTS.flip(-1).cumsum(-1).flip(-1).clamp(max=self.npos_max - 1)
        z_BHTN = q_BHTK.float() @ e_KN  # q . e[n] for every integer position n
        lo_BHTS = p_BHTS.floor()
        w_BHTS = p_BHTS - lo_BHTS  # the gradient reaches the gates through the weight only
        z_lo = z_BHTN.gather(-1, lo_BHTS.long())
        z_hi = z_BHTN.gather(-1, p_BHTS.ceil().long())
        return s_BHTS + (z_lo * (1 - w_BHTS) + z_hi * w_BHTS) / math.sqrt(q_BHTK.shape[-1])

    class Speed(PESpeed):
        def logits_mod_bytes(self, B, H, T, S):
            # float32 (B, H, T, S) tensors alive at once at the peak, the interpolation's last line: gates (a local),
            # p, lo, w, z_lo, z_hi, then (1 - w) * z_lo and z_hi * w and their sum beside them (9; the int64 index of
            # the gathers, 2 floats' worth, is freed before); plus q . e[n], (B, H, T, npos_max)
            return 4 * B * H * T * (9 * S + self.pe.npos_max)

        def layer_flops(self, layer, seq_len):
            # q . e[n] for every integer position (a multiply-add per table weight and head), then per head and key:
            # the cumulative sum (1), p - floor(p) (1), the interpolation (4), the 1/sqrt(K) and the add to the
            # logit (2); the gates' sigmoid is left out, as softmax's exp is
            forward = 2 * self.pe.ctx.d_model * self.pe.npos_max + 8 * self.pe.ctx.n_heads * seq_len
            return forward, 3 * forward  # a training step: forward and two backward matmuls, as the model's terms
