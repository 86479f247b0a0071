"""The two non-causal attentions of the encoder-decoder: bidirectional self-attention over a padded
source, and cross-attention from the decoder to the encoder's output. The decoder's own causal
self-attention is `attention.Attention` unchanged.

Shape legend: B batch, H heads, T query tokens, S key tokens, K head dim, D model dim.

Both run through `masked_attention`: SDPA with an explicit (B, H, T, S) float mask that carries the PE's
logit bias (materialised from its score_mod, as the eager kernel does) and -inf at padded keys. These
models are small (the Pig Latin study), so materialising the bias is cheap; there is no causal
alignment to get right because nothing is masked by position.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from posbench.model.attention import Attention
from posbench.model.kernels import materialize_bias
from posbench.model.norms import RMSNorm
from posbench.pe.encoding import PositionalEncoding


def key_mask(score_mod, keep_BS, H: int, T: int, device) -> torch.Tensor:
    """(B, H|1, T|1, S) float32: the PE's logit bias at kept keys, -inf at padded ones."""
    bias = torch.zeros((), device=device) if score_mod is None else \
        materialize_bias(score_mod, H, T, keep_BS.shape[1], device)
    return torch.where(keep_BS[:, None, None, :], bias, float("-inf"))


def masked_attention(q_BHTK, k_BHSK, v_BHSK, score_mod, keep_BS, dropout: float, training: bool):
    """softmax(q k^T / sqrt(K) + bias) v over keys with keep_BS True; every row keeps at least one key."""
    B, H, T, _ = q_BHTK.shape
    mask = key_mask(score_mod, keep_BS, H, T, q_BHTK.device).to(q_BHTK.dtype)
    return F.scaled_dot_product_attention(q_BHTK, k_BHSK, v_BHSK, attn_mask=mask.expand(B, H, T, -1),
                                          dropout_p=dropout if training else 0.0)


class BidirectionalAttention(Attention):
    """The decoder's attention (same projections, QK-norm and PE hooks) without the causal mask."""

    def __init__(self, d_model: int, n_heads: int, layer: int, qk_norm: bool, norm_eps: float,
                 dropout: float, attn_dropout: float):
        super().__init__(d_model, n_heads, layer, None, qk_norm, norm_eps, dropout)
        self.attn_dropout = attn_dropout

    def forward(self, x_BTD, pos_T, pe: PositionalEncoding, keep_BT: torch.Tensor):
        B, T, D = x_BTD.shape
        q, k, v, _ = self._qkv(x_BTD, pos_T, pe, None)
        out = masked_attention(q, k, v, pe.score_mod(self.layer, pos_T, pos_T), keep_BT, self.attn_dropout,
                               self.training)
        return self.resid_dropout(self.proj(out.transpose(1, 2).reshape(B, T, D)))

    def scores(self, x_BTD, pos_T, pe: PositionalEncoding, keep_BT: torch.Tensor) -> torch.Tensor:
        """Pre-softmax logits (B, H, T, T), float32, -inf at padded keys: for analysis and tests."""
        q, k, _, _ = self._qkv(x_BTD, pos_T, pe, None)
        s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        return s + key_mask(pe.score_mod(self.layer, pos_T, pos_T), keep_BT, q.shape[1], q.shape[2], q.device)


class CrossAttention(nn.Module):
    """Queries from the decoder, keys and values from the encoder output. Content-only: no PE acts here
    (positions already live in each stack's hidden states), so source and target positions, which
    count different things, are never compared."""

    def __init__(self, d_model: int, n_heads: int, qk_norm: bool, norm_eps: float, dropout: float,
                 attn_dropout: float):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.kv = nn.Linear(d_model, 2 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.q_norm = RMSNorm(self.head_dim, norm_eps) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.head_dim, norm_eps) if qk_norm else nn.Identity()
        self.resid_dropout = nn.Dropout(dropout)
        self.attn_dropout = attn_dropout

    def memory_kv(self, mem_BSD) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of the encoder output: computed once per source, cached for decoding."""
        B, S, D = mem_BSD.shape
        kv = self.kv(mem_BSD).view(B, S, 2, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return self.k_norm(kv[0]), kv[1]

    def forward(self, x_BTD, k_BHSK, v_BHSK, keep_BS):
        B, T, D = x_BTD.shape
        q_BHTK = self.q_norm(self.q(x_BTD).view(B, T, self.n_heads, self.head_dim).transpose(1, 2))
        out = masked_attention(q_BHTK, k_BHSK, v_BHSK, None, keep_BS, self.attn_dropout, self.training)
        return self.resid_dropout(self.proj(out.transpose(1, 2).reshape(B, T, D)))
