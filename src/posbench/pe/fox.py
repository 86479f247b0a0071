"""FoX, the Forgetting Transformer (Lin et al., ICLR 2025): no positional encoding; a data-dependent forget gate
per layer and head, f_t = sigmoid(w^T x_t + b) from the layer's attention input x_t, down-weights the logits by

    D_ij = sum_{l=j+1}^{i} log f_l = c_i - c_j,   c = cumsum(log f)

(a softmax over q_i k_j + D_ij is attention with a decay prod_{l=j+1}^{i} f_l on each key). Defaults from the
authors' code (zhixuan-lin/forgetting-transformer, modeling_forgetting_transformer.py, fgate_type="full"): the
gate projection is a Linear(d_model, n_heads) with a bias, weight ~ N(0, 0.02), bias 0; log f in float32. Weight
decay as theirs: `group_parameters` (src/forgetting_transformer/utils.py) decays every nn.Linear weight, the gate's
included, and exempts biases (`bias_weight_decay` False, configs/config.py), so `decay_params` lists the weight.

Shape legend: B batch, H heads, T query tokens, S cached + new keys, D model dim, L layers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from posbench.pe.encoding import PES, PositionalEncoding
from posbench.pe.speed import PESpeed


@PES.register("fox")
class ForgetGate(PositionalEncoding):
    kind = "bias"
    summary = "FoX: data-dependent forget gates, logit bias sum of log f between key and query (Lin et al. 2025)"

    @staticmethod
    def log_gate(logit_BTH):
        """log f_t from the gate's logit: FoX's log sigmoid (a subclass with another gate, CABLE, replaces it)."""
        return F.logsigmoid(logit_BTH)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        # one Linear(d_model, n_heads) per layer, stacked; the weight is decayed, the bias not (decay_params)
        self.weight_LHD = nn.Parameter(torch.empty(ctx.n_layers, ctx.n_heads, ctx.d_model))
        self.bias_LH = nn.Parameter(torch.empty(ctx.n_layers, ctx.n_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight_LHD, std=self.ctx.init_std)
        nn.init.zeros_(self.bias_LH)

    def decay_params(self):
        # AdamW's decoupled decay is elementwise, so decaying the stacked (L, H, D) weight is decaying each layer's
        return [self.weight_LHD]

    def token_features(self, layer, x_BTD):
        """log f_t (B, H, T), float32: the forget gates in log space, so the cumulative sum cannot underflow."""
        logit_BTH = x_BTD.float() @ self.weight_LHD[layer].float().t() + self.bias_LH[layer].float()
        return self.log_gate(logit_BTH).transpose(1, 2)

    def score_mod(self, layer, pos_q_T, pos_k_S, feats_BHS=None):
        # c over every key (cached ones included: the cache keeps each key's log f). Only differences c_i - c_j
        # of one row are used, so earlier documents of a packed window, which shift c, change nothing within a
        # document (the document mask does the rest).
        c_BHS = feats_BHS.cumsum(-1)
        T = pos_q_T.shape[-1]
        c_BHT = c_BHS[..., c_BHS.shape[-1] - T:]

        def mod(score, b, h, q_idx, kv_idx):
            # future keys get c_i - c_j >= 0, finite: they are masked anyway
            return score + (c_BHT[b, h, q_idx] - c_BHS[b, h, kv_idx])

        return mod

    class Speed(PESpeed):
        def layer_flops(self, layer, seq_len):
            # the gate projection (a multiply-add per weight), the cumulative sum (one add per head), and c_i - c_j
            # added to every logit (two per head and key); logsigmoid is left out, as softmax's exp is
            H, D = self.pe.ctx.n_heads, self.pe.ctx.d_model
            forward = 2 * D * H + H + 2 * H * seq_len
            return forward, 3 * forward  # a training step: forward and two backward matmuls, as the model's terms
