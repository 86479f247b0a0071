"""Attention with a logit bias that is affine in the distance beyond a near band, at the cost of plain SDPA.

Shape legend: B batch, H heads, T query length, S key length (S >= T with a KV cache), K head dim; R rows
(queries) of one chunk, N keys of its near band.

Why: with the bias as a float mask (model/bias_attention.py) torch's CPU flash kernel reads one float per logit
and cannot skip masked tiles as `is_causal` does, which left ALiBi at 1.5x RoPE's time at 8,192 tokens. Several
bias PEs are affine in the distance d = i - j from some distance `start` on (`FarField`): ALiBi everywhere
(-m d), T5 past its last bucket's first distance and relative_learned past its clip (constants). Such a bias
needs no mask there:

    bias(i, j) = c + a (i - j) = [c + a (i - p0)] + [a (p0 - j)]      (p0: the chunk's first query position)

The first term is constant along a query's row, so it shifts that row's log-sum-exp and nothing else; the
second depends on the key alone, so it is one more head dimension: q' = [q, 1], k' = [k, a (p0 - j) / scale],
v' = [v, 0] (a = 0, a constant far field, needs none). Per chunk of R queries at positions p0 .. p0 + R - 1:

  near  keys p0 - (start - 1) .. p0 + R - 1 (at most start - 1 + R): SDPA with the bias table as a float mask,
        -inf over each query's future; every query of the chunk sees key p0, so no row is empty
  far   keys 0 .. p0 - start: at distance >= start from every query of the chunk: SDPA with no mask at all

and the two are merged by their log-sum-exps (as flash attention merges its key tiles). Keeping p0 in the key
term keeps its magnitude at the bias's own (the distance), so it rounds like the eager kernel's `a * d`; the
far keys' logits round differently from eager's only in the order of the same sums (parity: 1e-5).

Only without autograd, for calls whose distance table (`FastBias.table`, pe/fast_bias.py) serves every query
(consecutive positions) and without a sliding window or documents: model/attention_plan.py's FAR_FIELD rule.
"""

from __future__ import annotations

import math

import torch

from posbench.model.bias_attention import distance_grid
from posbench.model.masks import causal_mask
from posbench.pe.fast_bias import FarField

# queries per chunk: 256 to 1,024 measured alike at 8,192 tokens (nano, one thread); fewer chunks mean fewer calls,
# more rows mean a larger near band per chunk
CHUNK_ROWS = 256
# below this many queries (decoding steps, short prompts) the one-block or blocked float mask is as cheap and needs no
# padded copies of the keys and values (model/attention_plan.py's FAR_FIELD rule)
MIN_QUERIES = 256

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu  # (out, log-sum-exp): SDPA's CPU kernel


def _merge(out_a, lse_a, out_b, lse_b):
    """Two softmax-attention results over disjoint key sets -> the result over their union (log-sum-exps: (B, H, R),
    outputs (B, H, R, K))."""
    lse = torch.logaddexp(lse_a, lse_b)
    return out_a * (lse_a - lse).exp_()[..., None] + out_b * (lse_b - lse).exp_()[..., None]


def far_field_attention(q_BHTK: torch.Tensor, k_BHSK: torch.Tensor, v_BHSK: torch.Tensor, table_HS: torch.Tensor,
                        far: FarField, rows: int | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(K) + bias, causal) v with query t at key position S - T + t, where the bias at distance
    d is table_HS[h, d] (d < far.start or anywhere) and far.intercept_H + far.slope_H * d for d >= far.start.
    `rows`: queries per chunk (default CHUNK_ROWS). Float32 inside, returned in q's dtype."""
    B, H, T, K = q_BHTK.shape
    S = k_BHSK.shape[-2]
    rows = min(T, rows or CHUNK_ROWS)
    scale = 1.0 / math.sqrt(K)
    q, k, v = q_BHTK.float(), k_BHSK.float(), v_BHSK.float()
    band = max(far.start - 1, 0)  # keys before a chunk's first query that are not far from all its queries
    near_mask = _near_mask(table_HS, band, rows)  # (1, H, rows, band + rows), the same for every full chunk
    sloped = bool(far.slope_H.ne(0).any())
    if sloped:  # the key term as one more dimension; the values' is zero, so the output's last column is dropped
        qx = torch.cat((q, q.new_ones(B, H, T, 1)), dim=-1)
        kx = torch.cat((k, k.new_zeros(B, H, S, 1)), dim=-1)
        vx = torch.cat((v, v.new_zeros(B, H, S, 1)), dim=-1)
        slope_H1 = (far.slope_H.float() / scale)[:, None]
        key_pos_S = torch.arange(S, device=q.device, dtype=torch.float32)
    out_BHTK = torch.empty_like(q)
    for q0 in range(0, T, rows):
        q1 = min(T, q0 + rows)
        R, p0 = q1 - q0, S - T + q0
        n0 = max(p0 - band, 0)
        mask = near_mask[:, :, :R, band - (p0 - n0):band + R]
        out, lse = _flash(q[:, :, q0:q1], k[:, :, n0:p0 + R], v[:, :, n0:p0 + R], 0.0, False,
                          attn_mask=mask, scale=scale)
        if n0 > 0:  # keys 0 .. n0 - 1 are far from every query of the chunk
            if sloped:
                kx[:, :, :n0, K] = slope_H1 * (p0 - key_pos_S[:n0])
                far_out, far_lse = _flash(qx[:, :, q0:q1], kx[:, :, :n0], vx[:, :, :n0], 0.0, False, scale=scale)
                far_out = far_out[..., :K]
            else:
                far_out, far_lse = _flash(q[:, :, q0:q1], k[:, :, :n0], v[:, :, :n0], 0.0, False, scale=scale)
            # the row term c + a (i - p0): constant along each query's row
            row_term_HR = far.intercept_H.float()[:, None] + far.slope_H.float()[:, None] * \
                torch.arange(R, device=q.device, dtype=torch.float32)
            out = _merge(out, lse, far_out, far_lse + row_term_HR)
        out_BHTK[:, :, q0:q1] = out
    return out_BHTK.to(q_BHTK.dtype)


def _near_mask(table_HS: torch.Tensor, band: int, rows: int) -> torch.Tensor:
    """(1, H, rows, band + rows) float32: the bias of query p0 + r against key p0 - band + c from the table, -inf
    where the key is in the query's future: a call of `rows` queries after `band` keys. 4-D: SDPA's CPU flash path
    takes only a 4-D mask."""
    mask = distance_grid(table_HS, rows, band + rows)
    return mask.masked_fill_(~causal_mask(rows, band + rows, table_HS.device), float("-inf"))[None]
