"""PaTH attention (Yang et al., NeurIPS 2025, arXiv 2505.16381): no positional encoding; each token t makes a
data-dependent generalised Householder transform H_t = I - beta_t w_t w_t^T, and query i scores key j through the
product of the transforms of the tokens after the key, the query's own included:

    s_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(K)   (j < i),   s_ii = q_i . k_i / sqrt(K)

Facts from the authors' code (fla-org/flash-linear-attention, commit bc3b101, fla/layers/path_attn.py): w from a
low-rank projection d_model -> 32 -> H*K without biases (lines 62-66, `use_low_rank_w` True by default), a causal
depthwise convolution of width 3 over those H*K channels, no bias, then silu (line 81), w L2-normalised per head
in float32 (line 124; fla/modules/l2norm.py: x / sqrt(sum x^2 + 1e-6)); beta_t = 2 sigmoid(Linear(d_model, H) with
a bias), in (0, 2), "allowing negative eigenvalues" (lines 83, 111); the forget gate off (line 36: not carried
here); no q/k norm of their own (line 37: posbench's model.qk_norm applies as for every PE); scale 1/sqrt(K)
(fla/ops/path_attn/parallel.py line 266). Decoding (lines 149-159): every cached key takes the new token's update
k <- k - beta (w.k) w, then the new key is appended unchanged and the query attends with plain dot products, so
H_i acts on every earlier key of query i. Init (fla/models/path_attn/modeling_path_attention.py `_init_weights`,
lines 181-197): every Linear and the Conv1d weight ~ N(0, 0.02), biases 0, so beta starts near 1.

The logits come from the authors' chunked UT form (fla/ops/path_attn/naive.py lines 60-90) in float32: within a
chunk of C tokens, with L = strict_tril(diag(beta) W W^T), the unit lower-triangular solve X = (I + L)^{-1} diag(beta)
[strict_tril(W K^T) | W] gives each key carried to its chunk's end, each query carried back to its chunk's start and
the chunk's product I - W^T X_W; across chunks the queries walk back one chunk product at a time. O(S^2 K + S C^2)
per head, differentiable by autograd. The PE returns s - (q.k - q^T P k) / sqrt(K): a transform that is the identity
(w = 0) leaves the kernel's logits bit for bit.

The KV cache keeps the raw keys and, as token features, each token's projection before the convolution and its
beta, (B, H, K + 1, S) (channels before tokens, so the cache's concatenation along the last axis extends the
tokens); each call redoes the convolution and the transforms over every cached token, which equals the authors'
rank-one updates of stored keys (tests/pe/test_path.py holds both to a float64 loop). The convolution restarts at a
document start (model.packing.mask=document; the authors' restarts per sequence, cu_seqlens), seen as a query whose
own row masks the token before it (so also at a model.attention_chunk start); a start that is already in the KV
cache is not seen again, so cached decoding past a document start inside the cache differs there.
Shape legend: B batch, H heads, T queries (the last T of the S keys), S keys, K head dim, D model dim, C chunk.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from posbench.pe.encoding import PES, PositionalEncoding
from posbench.pe.speed import PESpeed

RANK = 32  # the w projection's bottleneck (the authors' layer, line 64)
CONV = 3  # the w convolution's width (the authors' layer, line 40, conv_size)
CHUNK = 64  # tokens per chunk of the UT form (the authors' naive op's chunk_size default)


@PES.register("path")
class PaTH(PositionalEncoding):
    kind = "context"
    summary = "PaTH: keys carried to each query through data-dependent Householder transforms I - beta w w^T of the " \
              "tokens between them (Yang et al. 2025; eager only)"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        L, H, D = ctx.n_layers, ctx.n_heads, ctx.d_model
        width = H * ctx.head_dim
        self.w_down_LRD = nn.Parameter(torch.empty(L, RANK, D))
        self.w_up_LWR = nn.Parameter(torch.empty(L, width, RANK))
        self.w_conv_LWC = nn.Parameter(torch.empty(L, width, CONV))
        self.beta_LHD = nn.Parameter(torch.empty(L, H, D))
        self.beta_bias_LH = nn.Parameter(torch.empty(L, H))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for weight in (self.w_down_LRD, self.w_up_LWR, self.w_conv_LWC, self.beta_LHD):
            nn.init.normal_(weight, std=self.ctx.init_std)
        nn.init.zeros_(self.beta_bias_LH)

    def token_features(self, layer, x_BTD):
        """(B, H, K + 1, T) float32: per head, w's projection before the convolution (K) and beta (1)."""
        B, T, _ = x_BTD.shape
        x = x_BTD.float()
        w_BTW = (x @ self.w_down_LRD[layer].float().t()) @ self.w_up_LWR[layer].float().t()
        beta_BTH = 2 * torch.sigmoid(x @ self.beta_LHD[layer].float().t() + self.beta_bias_LH[layer].float())
        w_BTHK = w_BTW.view(B, T, self.ctx.n_heads, self.ctx.head_dim)
        return torch.cat((w_BTHK, beta_BTH[..., None]), dim=-1).permute(0, 2, 3, 1)

    def directions(self, layer, feats_BHFS, seg_BS):
        """(w (B, H, S, K) unit per head, beta (B, H, S)) of every key: the causal convolution within each segment
        (`seg_BS`, `segments`), silu, L2 norm."""
        B, H, F1, S = feats_BHFS.shape
        K = F1 - 1
        pre_BWS = feats_BHFS[:, :, :K].reshape(B, H * K, S)
        weight_WC = self.w_conv_LWC[layer].float()
        conv_BWS = torch.zeros_like(pre_BWS)
        for back in range(CONV):  # weight[CONV - 1] on the token itself, as nn.Conv1d with causal padding
            same_BS = F.pad(seg_BS, (back, 0), value=-1)[:, :S] == seg_BS
            conv_BWS = conv_BWS + weight_WC[:, CONV - 1 - back, None] * F.pad(pre_BWS, (back, 0))[..., :S] \
                * same_BS[:, None]
        w_BHSK = F.silu(conv_BWS).view(B, H, K, S).transpose(-1, -2)
        w_BHSK = w_BHSK * torch.rsqrt(w_BHSK.square().sum(-1, keepdim=True) + 1e-6)
        return w_BHSK, feats_BHFS[:, :, K]

    def logits_mod(self, layer, q_BHTK, s_BHTS, k_BHSK=None, feats_BHS=None):
        with torch.autocast(q_BHTK.device.type, enabled=False):  # the triangular solves want float32
            w_BHSK, beta_BHS = self.directions(layer, feats_BHS.float(), segments(s_BHTS))
            q_BHTK = q_BHTK.float() / math.sqrt(q_BHTK.shape[-1])  # the logits' scale, on T x K numbers
            delta = path_delta(q_BHTK, k_BHSK.float(), w_BHSK, beta_BHS, min(CHUNK, k_BHSK.shape[-2]))
            return s_BHTS - delta  # masked keys stay -inf

    class Speed(PESpeed):
        def logits_mod_bytes(self, B, H, T, S):
            # float32 at the peak, the assembly of the correction: the blocks beside their stack, then each step
            # (the gather, the masking, the permuted copy) beside the one before, two (B, H, T_pad, S_pad) at once;
            # then the correction and s - delta; the per-chunk terms are O(S (C + K)) per head
            # (scripts/bench_eval_memory.py: predicted / measured peak 0.99-1.03 at 1024, 2048 and 4096 tokens)
            T_pad, S_pad = _padded(T, S, min(CHUNK, S))
            return 4 * B * H * (2 * T_pad * S_pad + T * S)

        def layer_flops(self, layer, seq_len):
            # per token: w's projections (2 matmuls through 32), its convolution, beta's projection; per head and
            # token the chunk terms (W W^T, Q W^T, W K^T: 3 x 2CK; the triangular solve with C + K right-hand sides:
            # C (C + K); the corrections of the local logits, the queries and the keys: 2C^2 + 4CK; the chunk product
            # 2K^2), and over every key q.k - q~.k~ (4K) with the query's walk back (2K^2 per chunk of keys)
            H, K, D = self.pe.ctx.n_heads, self.pe.ctx.head_dim, self.pe.ctx.d_model
            C = min(CHUNK, seq_len)
            proj = 4 * D * RANK + 2 * CONV * D + 2 * D * H
            per_head = 10 * C * K + C * (C + K) + 2 * C * C + 2 * K * K + 4 * K * seq_len + 2 * K * K * seq_len / C
            forward = proj + H * (per_head + seq_len)  # and s - delta on every logit
            return forward, 3 * forward  # a training step: forward and two backward matmuls, as the model's terms


def segments(s_BHTS):
    """(B, S) segment index of every token for w's convolution: a query whose own row masks the token before it
    (a document start under model.packing.mask=document, where the authors restart the convolution too; an
    attention chunk's start) starts a segment. Cached tokens start none: the row that showed their start is gone."""
    T, S = s_BHTS.shape[-2:]
    rows = torch.arange(max(S - T, 1) - (S - T), T, device=s_BHTS.device)  # queries with a token before them
    start_BS = torch.zeros(s_BHTS.shape[0], S, dtype=torch.long, device=s_BHTS.device)
    start_BS[:, S - T + rows] = s_BHTS[:, 0, rows, S - T + rows - 1].isneginf().long()
    return start_BS.cumsum(-1)


def _padded(T: int, S: int, C: int) -> tuple[int, int]:
    """(queries, keys) padded to whole chunks: from the first chunk holding a query, and from the first token."""
    n = -(-S // C)
    first = (S - T) // C
    return (n - first) * C, n * C


def chunk_terms(k_BHNCK, w_BHNCK, beta_BHNC):
    """Per chunk of C tokens: A (B, H, N, C, C) with A_tj = beta_t w_t . (H_{t-1} ... H_{j+1} k_j) for j < t, so a
    key carried to its chunk's end is k_j - sum_t A_tj w_t; U = (I + L)^{-1} diag(beta) W (B, H, N, C, K), which
    carries a query back to its chunk's start (q - tril(q W^T) U) and makes the chunk's product I - W^T U."""
    C = k_BHNCK.shape[-2]
    strict_CC = torch.ones(C, C, dtype=torch.bool, device=k_BHNCK.device).tril(-1)
    wb = w_BHNCK * beta_BHNC[..., None]  # diag(beta) W
    unit = torch.eye(C, dtype=k_BHNCK.dtype, device=k_BHNCK.device) + (wb @ w_BHNCK.transpose(-1, -2)) * strict_CC
    rhs = torch.cat(((wb @ k_BHNCK.transpose(-1, -2)) * strict_CC, wb), dim=-1)
    x = torch.linalg.solve_triangular(unit, rhs, upper=False, unitriangular=True)
    return x[..., :C], x[..., C:]


def path_delta(q_BHTK, k_BHSK, w_BHSK, beta_BHS, C: int):
    """(B, H, T, S) q_i . k_j - q_i^T H_i ... H_{j+1} k_j (j <= i) for the last T of S tokens, 0 past the query
    (masked by the caller). Padding tokens after the last one have w = 0 (H = I) and change nothing."""
    B, H, T, K = q_BHTK.shape
    S = k_BHSK.shape[-2]
    T_pad, S_pad = _padded(T, S, C)
    n, first = S_pad // C, (S_pad - T_pad) // C  # chunks, the first one holding a query
    offset = S - T - first * C  # the first query's place in its chunk
    k = F.pad(k_BHSK, (0, 0, 0, S_pad - S)).view(B, H, n, C, K)
    w = F.pad(w_BHSK, (0, 0, 0, S_pad - S)).view(B, H, n, C, K)
    beta = F.pad(beta_BHS, (0, S_pad - S)).view(B, H, n, C)
    q = F.pad(q_BHTK, (0, 0, offset, T_pad - T - offset)).view(B, H, n - first, C, K)
    A, U = chunk_terms(k, w, beta)
    k_end = k - A.transpose(-1, -2) @ w  # each key carried to its chunk's end
    G = w.transpose(-1, -2) @ U  # (B, H, n, K, K): the chunk's product is I - G
    qw = (q @ w[:, :, first:].transpose(-1, -2)).tril()  # t <= i: the query's own H_i acts
    blocks = [qw @ A[:, :, first:]]  # within the query's chunk
    q_back = q - qw @ U[:, :, first:]  # each query carried back to its chunk's start
    blocks_lo = 0
    chunk_q = torch.arange(first, n, device=q.device)
    for d in range(1, n):  # the key chunk d chunks before each query chunk that has one
        lo = max(0, d - first)  # query chunks before it have no key chunk d back: they stay 0
        m = chunk_q[lo:] - d
        q_back = q_back[:, :, lo - blocks_lo:]
        blocks_lo = lo
        block = q[:, :, lo:] @ k[:, :, m].transpose(-1, -2) - q_back @ k_end[:, :, m].transpose(-1, -2)
        blocks.append(F.pad(block, (0, 0, 0, 0, lo, 0)))
        q_back = q_back - q_back @ G[:, :, m]
    Z = torch.stack(blocks, dim=3)  # (B, H, n - first, n: distance in chunks, C, C)
    dist = chunk_q[:, None] - torch.arange(n, device=q.device)[None, :]  # (query chunk, key chunk)
    Z = Z[:, :, torch.arange(n - first, device=q.device)[:, None], dist.clamp(min=0)]
    Z = Z.masked_fill((dist < 0)[:, :, None, None], 0.0)  # keys after the query's chunk
    delta = Z.permute(0, 1, 2, 4, 3, 5).reshape(B, H, T_pad, S_pad)
    return delta[:, :, offset:offset + T, :S]
