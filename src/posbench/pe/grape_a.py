"""GRAPE-A, additive GRAPE (Group Representational Position Encoding, ICLR 2026, arXiv 2512.07805), key-gated: a
unipotent group action that lands in the logits as a linear-in-distance bias whose rate each key sets,

    b_ij = -(i - j) softplus(omega_h) m_h softplus(u_h^ . k_j / sqrt(K))   (j <= i),   u_h^ = u_h / |u_h|

with m_h ALiBi's slopes: ALiBi when the gate is constant, a key-dependent forgetting rate otherwise.

Facts from the authors' code (model-architectures/GRAPE, commit f5b539f, model/llama-mha-grape-a-keygated.py):
the bias (lines 95-114) reads the keys after their QK RMSNorm (lines 181-186; posbench's model.qk_norm, which
precedes every PE); slopes as ALiBi's paper code (lines 24-38, pe/alibi.py `alibi_slopes`); omega per head through
a softplus, initialised softplus^-1(1) (`keygated_omega_init` None, lines 71-78); u per head ~ N(0, 1/sqrt(K))
(line 80), L2-normalised with eps 1e-6 (lines 105-107, `keygated_u_l2_norm` True), spared by their weight init
(line 298). Per layer, as each attention layer builds its own (line 150). Weight decay: their optimizer decays
every parameter but RMSNorm weights (optim_utils.py lines 8-30), so `decay_params` lists omega and u.

The gate reads the keys, which `score_mod` cannot (its token features come from the layer input), so the bias is a
`logits_mod` over the keys attention hands it: eager kernel only. Distances are token distances (the query i of
the last T is key S - T + i), as the authors'; with document packing the document mask keeps them within one.
The authors' query-gated and query+key-gated files and GRAPE-AP (path-integral) are not implemented here.
Shape legend: B batch, H heads, T queries (the last T of the S keys), S keys, K head dim, L layers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from posbench.pe.alibi import alibi_slopes
from posbench.pe.encoding import PES, PositionalEncoding
from posbench.pe.speed import PESpeed

U_EPS = 1e-6  # F.normalize's eps on u (the authors' keygated_u_l2_eps)


@PES.register("grape_a")
class GrapeA(PositionalEncoding):
    kind = "bias"
    summary = "GRAPE-A key-gated: ALiBi-slope distance bias with a per-key softplus rate (GRAPE, ICLR 2026; " \
              "eager only)"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        L, H, K = ctx.n_layers, ctx.n_heads, ctx.head_dim
        self.omega_LH = nn.Parameter(torch.full((L, H), math.log(math.expm1(1.0))))
        self.u_LHK = nn.Parameter(torch.randn(L, H, K) / math.sqrt(K))
        self.register_buffer("slopes_H", alibi_slopes(H), persistent=False)

    def decay_params(self):
        return [self.omega_LH, self.u_LHK]

    def rate(self, layer, k_BHSK):
        """(B, H, S) softplus(omega_h) m_h softplus(u_h^ . k_j / sqrt(K)), float32."""
        u_HK = F.normalize(self.u_LHK[layer].float(), dim=-1, eps=U_EPS)
        gate_BHS = F.softplus((k_BHSK.float() * u_HK[:, None]).sum(-1) / math.sqrt(k_BHSK.shape[-1]))
        return gate_BHS * (F.softplus(self.omega_LH[layer].float()) * self.slopes_H.float())[:, None]

    def logits_mod(self, layer, q_BHTK, s_BHTS, k_BHSK=None, feats_BHS=None):
        T, S = s_BHTS.shape[-2:]
        with torch.autocast(q_BHTK.device.type, enabled=False):
            i_T1 = torch.arange(S - T, S, device=s_BHTS.device, dtype=torch.float32)[:, None]
            dist_TS = (i_T1 - torch.arange(S, device=s_BHTS.device, dtype=torch.float32)).clamp(min=0)
            return s_BHTS - dist_TS * self.rate(layer, k_BHSK)[:, :, None]  # masked keys stay -inf


    class Speed(PESpeed):
        def logits_mod_bytes(self, B, H, T, S):
            # the (B, H, T, S) bias and the result at once, the (T, S) distances, the (B, H, S) rates
            return 4 * (2 * B * H * T * S + 2 * T * S + 4 * B * H * S)

        def layer_flops(self, layer, seq_len):
            # the gate u.k (2K), softplus and the rate per head and key; per head and key the bias (2) and its addition
            H, K = self.pe.ctx.n_heads, self.pe.ctx.head_dim
            forward = H * (2 * K + 4) + 3 * H * seq_len
            return forward, 3 * forward
