"""`model.attention_sinks`: a learned per-head sink logit in the softmax (gpt-oss; Xiao et al. 2024's sink made a
parameter, Miller's "softmax off by one" when the logit is 0).

    p[h, t, j] = exp(s[h, t, j]) / (exp(sink[h]) + sum_j' exp(s[h, t, j']))

A virtual key that every query sees, of logit sink[h] and value 0: it takes probability from the real keys and adds
nothing to the output, so a head may attend to nothing. Each kernel carries it its own way, with the same result:
eager concatenates the sink's column to the masked logits; SDPA attends over the keys and one zero key whose float
mask entry is sink[h] (q . 0 = 0); flex rescales its output by exp(lse) / (exp(lse) + exp(sink)) = sigmoid(lse -
sink) from its log-sum-exp. The virtual key is outside every mask (causal, window, document): it is not a position.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def softmax_with_sinks(s_BHTS: torch.Tensor, sinks_H: torch.Tensor) -> torch.Tensor:
    """The keys' probabilities of a softmax over the masked logits and the sink's column (dropped after)."""
    B, H, T, _ = s_BHTS.shape
    sink_BHT1 = sinks_H.to(s_BHTS.dtype).view(1, H, 1, 1).expand(B, H, T, 1)
    return torch.softmax(torch.cat((s_BHTS, sink_BHT1), dim=-1), dim=-1)[..., :-1]


def sdpa_with_sinks(q_BHTK, k_BHSK, v_BHSK, allowed, sinks_H, dropout: float = 0.0, bias=None):
    """SDPA over the keys and a zero key with a zero value: a float mask of 0 where `allowed` ((T, S) or
    (B, 1, T, S) bool), -inf elsewhere, `bias` ((H, T, S) or (B, H, T, S), optional) added, and sinks[h] in the
    zero key's column."""
    B, H, T, K = q_BHTK.shape
    dtype = q_BHTK.dtype
    mask = torch.zeros(allowed.shape, dtype=dtype, device=q_BHTK.device).masked_fill(~allowed, float("-inf"))
    if bias is not None:
        mask = mask + bias.to(dtype)
    mask = mask.expand(*mask.shape[:-3], H, T, mask.shape[-1]) if mask.dim() >= 3 else mask.expand(H, T, -1)
    lead = mask.shape[:-3]
    sink = sinks_H.to(dtype).view(H, 1, 1).expand(*lead, H, T, 1)
    mask = torch.cat((mask, sink), dim=-1)
    k = torch.cat((k_BHSK, k_BHSK.new_zeros(B, H, 1, K)), dim=2)
    v = torch.cat((v_BHSK, v_BHSK.new_zeros(B, H, 1, v_BHSK.shape[-1])), dim=2)
    return F.scaled_dot_product_attention(q_BHTK, k, v, attn_mask=mask, dropout_p=dropout)


def rescale_by_sinks(out_BHTK, lse_BHT, sinks_H):
    """A kernel's output without the sink, given its log-sum-exp over the real keys: times sigmoid(lse - sink)."""
    H = out_BHTK.shape[1]
    share = torch.sigmoid(lse_BHT.float() - sinks_H.float().view(1, H, 1))
    return (out_BHTK.float() * share[..., None]).to(out_BHTK.dtype)
