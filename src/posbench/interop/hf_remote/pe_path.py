"""PaTH attention (Yang et al. 2025) in posbench's remote code (torch only), with posbench's hooks and shapes
(pe_contract.py) and its parameter names: s_ij = q_i^T H_i ... H_{j+1} k_j / sqrt(K), H_t = I - beta_t w_t w_t^T,
w from a low-rank projection d -> 32 -> H*K, a causal depthwise convolution of width 3 and silu, L2-normalised per
head; beta = 2 sigmoid(Linear). The logits from the chunked UT form, as posbench/pe/path.py computes them.
Token features (B, H, K + 1, T): w's projection before the convolution and beta, cached beside the keys.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .pe_contract import PositionalEncoding, register

RANK, CONV, CHUNK = 32, 3, 64


@register("path")
class PaTH(PositionalEncoding):
    options = frozenset()

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        L, H, D, W = ctx.n_layers, ctx.n_heads, ctx.d_model, ctx.n_heads * ctx.head_dim
        self.w_down_LRD = nn.Parameter(torch.zeros(L, RANK, D))
        self.w_up_LWR = nn.Parameter(torch.zeros(L, W, RANK))
        self.w_conv_LWC = nn.Parameter(torch.zeros(L, W, CONV))
        self.beta_LHD = nn.Parameter(torch.zeros(L, H, D))
        self.beta_bias_LH = nn.Parameter(torch.zeros(L, H))

    @property
    def pads_ok(self) -> bool:
        return False  # the convolution of a row's first tokens would read its left pads

    def token_features(self, layer, x_BTD):
        B, T, _ = x_BTD.shape
        x = x_BTD.float()
        w_BTW = (x @ self.w_down_LRD[layer].float().t()) @ self.w_up_LWR[layer].float().t()
        beta_BTH = 2 * torch.sigmoid(x @ self.beta_LHD[layer].float().t() + self.beta_bias_LH[layer].float())
        w_BTHK = w_BTW.view(B, T, self.ctx.n_heads, self.ctx.head_dim)
        return torch.cat((w_BTHK, beta_BTH[..., None]), dim=-1).permute(0, 2, 3, 1)

    def logits_mod(self, layer, q_BHTK, s_BHTS, k_BHSK=None, feats_BHS=None):
        B, H, F1, S = feats_BHS.shape
        K = F1 - 1
        feats = feats_BHS.float()
        pre_BWS = feats[:, :, :K].reshape(B, H * K, S)
        seg_BS = segments(s_BHTS)
        conv = torch.zeros_like(pre_BWS)
        for back in range(CONV):  # within each segment: a query whose own row masks the token before it starts one
            same_BS = F.pad(seg_BS, (back, 0), value=-1)[:, :S] == seg_BS
            conv = conv + self.w_conv_LWC[layer].float()[:, CONV - 1 - back, None] \
                * F.pad(pre_BWS, (back, 0))[..., :S] * same_BS[:, None]
        w_BHSK = F.silu(conv).view(B, H, K, S).transpose(-1, -2)
        w_BHSK = w_BHSK * torch.rsqrt(w_BHSK.square().sum(-1, keepdim=True) + 1e-6)
        q = q_BHTK.float() / math.sqrt(q_BHTK.shape[-1])
        return s_BHTS - path_delta(q, k_BHSK.float(), w_BHSK, feats[:, :, K], min(CHUNK, S))


def segments(s_BHTS):
    """(B, S) segment index of every token, as posbench/pe/path.py's `segments`."""
    T, S = s_BHTS.shape[-2:]
    rows = torch.arange(max(S - T, 1) - (S - T), T, device=s_BHTS.device)
    start_BS = torch.zeros(s_BHTS.shape[0], S, dtype=torch.long, device=s_BHTS.device)
    start_BS[:, S - T + rows] = s_BHTS[:, 0, rows, S - T + rows - 1].isneginf().long()
    return start_BS.cumsum(-1)


def path_delta(q_BHTK, k_BHSK, w_BHSK, beta_BHS, C: int):
    """(B, H, T, S) q_i . k_j - q_i^T H_i ... H_{j+1} k_j for the last T of S tokens (0 past the query)."""
    B, H, T, K = q_BHTK.shape
    S = k_BHSK.shape[-2]
    n = -(-S // C)
    first = (S - T) // C
    nq, offset = n - first, S - T - first * C
    k = F.pad(k_BHSK, (0, 0, 0, n * C - S)).view(B, H, n, C, K)
    w = F.pad(w_BHSK, (0, 0, 0, n * C - S)).view(B, H, n, C, K)
    wb = w * F.pad(beta_BHS, (0, n * C - S)).view(B, H, n, C)[..., None]
    q = F.pad(q_BHTK, (0, 0, offset, nq * C - T - offset)).view(B, H, nq, C, K)
    strict = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(-1)
    unit = torch.eye(C, dtype=q.dtype, device=q.device) + (wb @ w.transpose(-1, -2)) * strict
    x = torch.linalg.solve_triangular(unit, torch.cat(((wb @ k.transpose(-1, -2)) * strict, wb), -1), upper=False,
                                      unitriangular=True)
    A, U = x[..., :C], x[..., C:]
    k_end, G = k - A.transpose(-1, -2) @ w, w.transpose(-1, -2) @ U
    qw = (q @ w[:, :, first:].transpose(-1, -2)).tril()
    blocks, q_back = [qw @ A[:, :, first:]], q - qw @ U[:, :, first:]
    chunk_q = torch.arange(first, n, device=q.device)
    for d in range(1, n):
        m = (chunk_q - d).clamp(min=0)
        blocks.append(q @ k[:, :, m].transpose(-1, -2) - q_back @ k_end[:, :, m].transpose(-1, -2))
        q_back = q_back - q_back @ G[:, :, m]
    dist = chunk_q[:, None] - torch.arange(n, device=q.device)[None, :]
    Z = torch.stack(blocks, dim=3)[:, :, torch.arange(nq, device=q.device)[:, None], dist.clamp(min=0)]
    Z = Z.masked_fill((dist < 0)[:, :, None, None], 0.0).permute(0, 1, 2, 4, 3, 5).reshape(B, H, nq * C, n * C)
    return Z[:, :, offset:offset + T, :S]
