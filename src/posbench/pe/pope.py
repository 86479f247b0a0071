"""PoPE, Polar Coordinate Position Embedding (Gopalakrishnan, Csordas, Schmidhuber, Mozer 2025, arXiv 2509.10534,
section 3): content sets only magnitudes and position only phases. Each of the K channels of a query/key is one
complex component c with magnitude mu = softplus(x_c) and phase t theta_c, theta_c = base^(-c/K), c = 0..K-1
(K frequencies, where RoPE has K/2); keys add a learnable phase bias delta_{h,c} (zero at init, kept in
[-2 pi, 0] as in lucidrains' x-transformers `PolarEmbedding`). The logit is
    a_ts = Re[q~_t^H k~_s] / sqrt(K) = sum_c mu_q,c mu_k,c cos((s - t) theta_c + delta_c) / sqrt(K).
Computed as a real dot product of 2K channels, [mu cos(phase), mu sin(phase)], so queries and keys (and the KV
cache) are twice as wide as the values; q carries a factor sqrt(2) so the kernels' 1/sqrt(2K) scale gives the
paper's 1/sqrt(K).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PEConfig, PositionalEncoding
from posbench.pe.speed import PESpeed


def pope_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    """theta_c = theta^(-c/K), c = 0..K-1: one frequency per channel."""
    return theta ** (-torch.arange(head_dim, dtype=torch.float32) / head_dim)


@PES.register("pope")
class PoPE(PositionalEncoding):
    kind = "rotary"
    summary = "PoPE: magnitudes softplus(q), softplus(k) from content, phases from position only (+ learned key bias)"

    @dataclass
    class Config(PEConfig):
        theta: float = 10000.0

        def check(self) -> None:
            if not self.theta > 1:
                raise ConfigError(f"pe.theta must be > 1, got {self.theta}")

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.register_buffer("inv_freq", pope_inv_freq(ctx.head_dim, cfg.theta), persistent=False)
        self.phase_bias = nn.Parameter(torch.zeros(ctx.n_heads, 1, ctx.head_dim))  # delta_{h,c}, on keys

    def polar(self, x_BHTK, phase_TK):
        """[mu cos(phase), mu sin(phase)], mu = softplus(x), in float32: (B, H, T, 2K)."""
        mu = F.softplus(x_BHTK.float())
        return torch.cat((mu * phase_TK.cos(), mu * phase_TK.sin()), dim=-1)

    def rotate(self, q_BHTK, k_BHTK, pos_T):
        phase_TK = pos_T.float()[..., None] * self.inv_freq
        if phase_TK.dim() == 3:  # per-row positions (B, T): broadcast over heads
            phase_TK = phase_TK[:, None]
        delta_H1K = self.phase_bias.float().clamp(-2 * math.pi, 0.0)
        q = self.polar(q_BHTK, phase_TK) * math.sqrt(2.0)
        k = self.polar(k_BHTK, phase_TK + delta_H1K)
        return q.to(q_BHTK.dtype), k.to(k_BHTK.dtype)

    class Speed(PESpeed):
        def layer_flops(self, layer: int, seq_len: int) -> tuple[float, float]:
            # q.k over 2K channels instead of K: one more 2 * T * D per layer forward, x3 for a training step
            extra = 2.0 * seq_len * self.pe.ctx.d_model
            return extra, 3 * extra
