"""Stick-breaking attention (Tan et al., ICLR 2025, arXiv 2410.17980): no positional encoding and no softmax. Query i
breaks a stick from its nearest key backwards: key j takes the share beta_ij of what the keys between them left,

    beta_ij = sigmoid(q_i . k_j / sqrt(K)),   A_ij = beta_ij prod_{j<k<i} (1 - beta_ik)   (j < i)

and the stick left over, prod_{k<i} (1 - beta_ik) = 1 - sum_j A_ij, goes to the query's own value. Semantics from
the authors' code (shawntan/stickbreaking-attention, commit 3147a38): the reference `stickbreaking`
(`stickbreaking_attention/sb_ref.py` lines 12-25: logits scaled by 1/sqrt(K), log A = log sigmoid(z) plus the sum of
log sigmoid(-z) over the keys after j, the remainder returned as `1 - att.sum(-1)`), the reference forward of their
tests (shawntan/stickbreaking-attention/tests/test_attn.py lines 10-17: the query's own key masked unless
`attend_current`, the remainder added as `rem * v`), and sb_attn's defaults
(`stickbreaking_attention/sb_attn/__init__.py`: inv_temp 1/sqrt(K), attend_current False). With pe.attend_current
the query's own key takes a share too, A_ii = beta_ii, and the product runs over j < k <= i; the remainder still
goes to v_i.

The weights of a row sum to 1, so softmax(log A) = A: the PE is a `logits_mod` that rewrites the masked logit matrix
into log A (the leftover stick on the query's own key), which only the eager kernel runs (like CoPE). Masked keys
(future, outside a window, another document) have logit -inf: beta 0, so they take nothing and break nothing.
Shape legend: B batch, H heads, T queries, S keys (the queries are the last T of them), K head dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posbench.pe.encoding import PES, PEConfig, PositionalEncoding
from posbench.pe.speed import PESpeed


@PES.register("stick_breaking")
class StickBreaking(PositionalEncoding):
    kind = "context"
    summary = "Stick-breaking attention: A_ij = sigmoid(z_ij) prod_{j<k<i} (1 - sigmoid(z_ik)), no softmax, no PE " \
              "(Tan et al. 2025; eager only)"

    @dataclass
    class Config(PEConfig):
        attend_current: bool = False  # the authors' default: the query's own key only takes the leftover stick

    def logits_mod(self, layer, q_BHTK, s_BHTS, k_BHSK=None, feats_BHS=None):
        T, S = s_BHTS.shape[-2:]
        keys_S = torch.arange(S, device=s_BHTS.device)
        own_TS = keys_S[None, :] == (S - T + torch.arange(T, device=s_BHTS.device))[:, None]  # the query's own key
        log_beta = F.logsigmoid(s_BHTS)  # -inf at masked keys
        log_rest = F.logsigmoid(-s_BHTS)  # log(1 - beta): 0 at masked keys, which break nothing
        if not self.cfg.attend_current:
            log_rest = log_rest.masked_fill(own_TS, 0.0)
        # sum over the keys after j (k > j) of log(1 - beta_ik): a reversed cumulative sum, less key j's own term
        after_BHTS = log_rest.flip(-1).cumsum(-1).flip(-1) - log_rest
        log_a_BHTS = log_beta + after_BHTS
        leftover_BHT1 = log_rest.sum(-1, keepdim=True)  # log prod_k (1 - beta_ik): the stick no key took
        own = torch.logaddexp(log_a_BHTS, leftover_BHT1) if self.cfg.attend_current else leftover_BHT1
        return torch.where(own_TS, own, log_a_BHTS)

    class Speed(PESpeed):
        def logits_mod_bytes(self, B, H, T, S):
            # float32 (B, H, T, S) tensors alive at once at the peak, the `where` at the end: log beta, log(1 - beta),
            # after, log A and the result (5; the flips and the cumulative sum free each other's input as they go).
            # (scripts/bench_eval_memory.py: predicted 1.03-1.04x of the measured peak at 1024, 2048 and 4096 tokens)
            return 4 * B * H * T * 5 * S

        def layer_flops(self, layer, seq_len):
            # per head and key: the reversed cumulative sum (1), less the key's own term (1), the add to log beta (1),
            # the row's leftover sum (1); the two log sigmoids are left out, as softmax's exp is
            forward = 4 * self.pe.ctx.n_heads * seq_len
            return forward, 3 * forward  # a training step: forward and two backward matmuls, as the model's terms
