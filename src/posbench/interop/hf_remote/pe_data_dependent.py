"""The data-dependent PEs of posbench's remote code (torch only): FoX's forget gates (token_features +
score_mod; CABLE, the same with its own gate), CoPE's contextual positions and stick-breaking attention (logits_mod),
with posbench's hooks and shapes (pe_contract.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .pe_contract import PositionalEncoding, register


@register("fox")
class ForgetGate(PositionalEncoding):
    """FoX (Lin et al. 2025): f_t = sigmoid(w.x_t + b) per layer and head; bias c_i - c_j, c = cumsum(log f)."""

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.weight_LHD = nn.Parameter(torch.zeros(ctx.n_layers, ctx.n_heads, ctx.d_model))
        self.bias_LH = nn.Parameter(torch.zeros(ctx.n_layers, ctx.n_heads))

    def token_features(self, layer, x_BTD):
        logit_BTH = x_BTD.float() @ self.weight_LHD[layer].float().t() + self.bias_LH[layer].float()
        return self.log_gate(logit_BTH).transpose(1, 2)

    @staticmethod
    def log_gate(logit_BTH):
        return F.logsigmoid(logit_BTH)

    def score_mod(self, layer, pos_q_BT, pos_k_BS, feats_BHS=None):
        # left pads come first: a real query's and key's c differ by real tokens' gates only
        c_BHS = feats_BHS.float().cumsum(-1)
        c_BHT = c_BHS[..., c_BHS.shape[-1] - pos_q_BT.shape[-1]:]

        def mod(score, b, h, q_idx, kv_idx):
            # future keys get c_i - c_j >= 0, finite: they are masked anyway
            return score + (c_BHT[b, h, q_idx] - c_BHS[b, h, kv_idx])
        return mod


@register("cable")
class Cable(ForgetGate):
    """CABLE (Veisi et al. 2025): FoX's bias with per-token terms -softplus(w.x_t + b): c = cumsum(-softplus)."""

    @staticmethod
    def log_gate(logit_BTH):
        return -F.softplus(logit_BTH)


@register("cope")
class CoPE(PositionalEncoding):
    """Golovneva et al. 2024: p_ij = sum_{t=j}^{i} sigmoid(q_i.k_t / sqrt(K)) (at most npos_max - 1), logit plus
    q_i . e[p_ij] / sqrt(K), e interpolated between integer positions; one table per layer (or shared)."""

    options = frozenset(("npos_max", "shared"))

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.npos_max = cfg.get("npos_max") or ctx.seq_len + 1
        n_tables = 1 if cfg.get("shared") else ctx.n_layers
        self.table_LKN = nn.Parameter(torch.zeros(n_tables, ctx.head_dim, self.npos_max))

    def logits_mod(self, layer, q_BHTK, s_BHTS, k_BHSK=None, feats_BHS=None):
        e_KN = self.table_LKN[0 if self.cfg.get("shared") else layer].float()
        p_BHTS = torch.sigmoid(s_BHTS).flip(-1).cumsum(-1).flip(-1).clamp(max=self.npos_max - 1)
        z_BHTN = q_BHTK.float() @ e_KN
        lo_BHTS = p_BHTS.floor()
        w_BHTS = p_BHTS - lo_BHTS
        z = z_BHTN.gather(-1, lo_BHTS.long()) * (1 - w_BHTS) + z_BHTN.gather(-1, p_BHTS.ceil().long()) * w_BHTS
        return s_BHTS + z / math.sqrt(q_BHTK.shape[-1])


@register("stick_breaking")
class StickBreaking(PositionalEncoding):
    """Tan et al. 2025: A_ij = sigmoid(z_ij) prod_{j<k<i} (1 - sigmoid(z_ik)), the leftover stick on the query's own
    key (with attend_current that key also takes sigmoid(z_ii)); rows sum to 1, so softmax(log A) = A."""

    options = frozenset(("attend_current",))

    def logits_mod(self, layer, q_BHTK, s_BHTS, k_BHSK=None, feats_BHS=None):
        T, S = s_BHTS.shape[-2:]
        own_TS = torch.arange(S, device=s_BHTS.device)[None, :] == (
            S - T + torch.arange(T, device=s_BHTS.device))[:, None]
        current = bool(self.cfg.get("attend_current", False))
        log_rest = F.logsigmoid(-s_BHTS)
        if not current:
            log_rest = log_rest.masked_fill(own_TS, 0.0)
        log_a = F.logsigmoid(s_BHTS) + log_rest.flip(-1).cumsum(-1).flip(-1) - log_rest
        leftover = log_rest.sum(-1, keepdim=True)
        return torch.where(own_TS, torch.logaddexp(log_a, leftover) if current else leftover, log_a)
