"""Attention with a logit bias, a block of queries at a time: SDPA with the bias as a float mask.

Shape legend: B batch, H heads, T query length, S key length (S >= T with a KV cache), K head dim; R rows
(queries) of one block, N keys of the block's span.

Why: the eager kernel builds (B, H, T, S) float32 scores, bias and probabilities, several times T x S floats
per head, in separate Python-level steps; at 8,192 tokens that is gigabytes and most of the time. Here each
block of R queries gets its bias (R, N) and its allowed mask only over the keys it may see, both folded into
one float mask (-inf where not allowed), and torch's fused SDPA does the rest: the peak is R x N floats per
head, never T x S. Keys beyond the block's last allowed key (the causal future) and before its first (a
window's start) are not passed to SDPA at all, which keeps about half of a causal T x S away.

The caller gives the bias as a function of the block (`bias_block(q0, q1, k0, k1)`: the bias of queries q0..q1-1
against keys k0..k1-1, in float32) and the allowed mask of the whole call, (T, S) or (B, 1, T, S) bool, made by
the same functions the eager kernel uses: this module only slices them, so it adds no masking logic of its own.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from posbench.model.masks import causal_mask

# floats of one block's mask, all heads (and rows, with per-row documents) together: 2**20 (4 MiB). Measured on
# the nano model (4 heads) at 2,048 and 8,192 tokens, 2**20 was fastest of 2**18 .. 2**24: larger blocks are
# fresh allocations the allocator maps and faults in page by page each time; smaller ones pay the loop's
# Python cost more often
BLOCK_ELEMENTS = 1 << 20
MIN_BLOCK_ROWS = 16  # fewest queries per block (very long keys): the loop's Python cost stays small against a block


def block_rows(T: int, S: int, width: int = 1) -> int:
    """Queries per block: about BLOCK_ELEMENTS / (width x S) (width: heads, times rows with per-row documents),
    at least MIN_BLOCK_ROWS, at most T."""
    return max(1, min(T, max(MIN_BLOCK_ROWS, BLOCK_ELEMENTS // max(width * S, 1))))


def column_span(allowed_RN: torch.Tensor) -> tuple[int, int]:
    """(lo, hi): the columns lo..hi-1 hold every entry some row may not see; (0, 0) when all are allowed."""
    cols = allowed_RN.reshape(-1, allowed_RN.shape[-1]).any(0).nonzero()
    if cols.numel() == 0:
        return 0, 0
    return int(cols[0]), int(cols[-1]) + 1


def block_spans(allowed: torch.Tensor, rows: int) -> list[tuple[int, int, int, int, int, int]]:
    """(q0, q1, k0, k1, m0, m1) of every block of `rows` queries: its queries, the keys k0..k1-1 it may see at all,
    and the keys m0..m1-1 (inside k0..k1) that some of its queries may not see, which alone need -inf."""
    T = allowed.shape[-2]
    spans = []
    for q0 in range(0, T, rows):
        q1 = min(T, q0 + rows)
        k0, k1 = column_span(allowed[..., q0:q1, :])
        if k1 == 0:  # no query of the block sees any key (never under a causal or document mask): SDPA over
            k1 = 1  # one masked key gives zero rows, where eager gives NaN
        m0, m1 = column_span(~allowed[..., q0:q1, k0:k1])
        spans.append((q0, q1, k0, k1, k0 + m0, k0 + m1))
    return spans


def distance_blocks(table_HS: torch.Tensor, T: int, S: int, rows: int) -> Callable[[int, int, int, int], torch.Tensor]:
    """`bias_block` for a bias that is a function of distance alone, `table_HS[h, d]` at distance d = 0 .. S-1,
    where query q (of T) and key k are S - T + q - k apart: each block is a strided view of the reversed table,
    **its rows (queries) in reverse order** (the order in which the view's offsets grow; see
    `blocked_bias_attention(rows_reversed=True)`), instead of the bias evaluated on every (head, query, key).
    Keys in a block's future (negative distances, at most `rows` - 1 of them, and masked) read zeros."""
    H = table_HS.shape[0]
    # rev[h, m]: the bias at distance S - 1 - m; m = S .. S - 1 + rows: negative distances, zero
    rev = torch.cat((table_HS.flip(-1), table_HS.new_zeros(H, rows)), dim=1).contiguous()
    L = rev.shape[1]

    def block(q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
        R, N = q1 - q0, k1 - k0
        # query q0 + i, key k0 + j sit at m = (T - 1 - q0 + k0) - i + j; with the rows reversed (i = R - 1 - r)
        # m = start + r + j: strides (L, 1, 1) over the reversed table
        start = T - q0 + k0 - R
        if start < 0 or start + R + N - 2 >= L:  # keys outside the causal span: not a distance this table has
            raise ValueError(f"block ({q0}, {q1}) x ({k0}, {k1}) reaches beyond the distance table of {S} keys")
        # a copy of its own: the caller writes -inf into it (a view with one head and one query would look
        # contiguous and be the table itself)
        view = rev.as_strided((H, R, N), (L, 1, 1), rev.storage_offset() + start)
        return view.clone(memory_format=torch.contiguous_format)

    return block


def split_blocks(first_row: int, table_block, rows_block) -> Callable[[int, int, int, int], torch.Tensor]:
    """`bias_block`, rows last to first, of a bias that is a function of distance for the queries before
    `first_row` (`table_block`: `distance_blocks` of their table) and evaluated per row after it (`rows_block`,
    the PE's `rows_bias`, rows last to first too; FIRE past its threshold). A block across `first_row` is the
    two joined: its later queries first, as the reversed order has them."""
    def block(q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
        if q1 <= first_row:
            return table_block(q0, q1, k0, k1)
        if q0 >= first_row:
            return rows_block(q0, q1, k0, k1)
        return torch.cat((rows_block(first_row, q1, k0, k1), table_block(q0, first_row, k0, k1)), dim=-2)

    return block


def blocked_bias_attention(q_BHTK: torch.Tensor, k_BHSK: torch.Tensor, v_BHSK: torch.Tensor,
                           bias_block: Callable[[int, int, int, int], torch.Tensor], allowed: torch.Tensor,
                           spans: list[tuple[int, int, int, int, int, int]] | None = None,
                           rows_reversed: bool = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(K) + bias, -inf where not allowed) v, in float32 like the eager reference, returned in
    q's dtype. `bias_block(q0, q1, k0, k1)`: (H, R, N) or (B, H, R, N) float32; `allowed`: (T, S) or (B, 1, T, S)
    bool; `spans`: `block_spans(allowed, rows)` when the caller keeps them (default: made here, block_rows);
    `rows_reversed`: `bias_block` gives each block's queries last to first (`distance_blocks`), so the block's
    queries run in that order too (each query's softmax is its own: the order changes nothing else)."""
    B, H, T, _ = q_BHTK.shape
    S = k_BHSK.shape[-2]
    if spans is None:  # a per-row mask (documents) makes a per-row bias: B x H floats per block entry
        spans = block_spans(allowed, block_rows(T, S, H * (B if allowed.dim() == 4 else 1)))
    q, k, v = q_BHTK.float(), k_BHSK.float(), v_BHSK.float()
    out_BHTK = torch.empty_like(q)
    for q0, q1, k0, k1, m0, m1 in spans:
        # the bias becomes the mask in place, -inf written only over the keys some query may not see (for a
        # causal block, its last R keys): a score_mod returns a new tensor (score + bias) and distance_blocks a
        # copy, so the block's bias is ours to write; a broadcast one (stride 0 somewhere) is copied out first
        mask = bias_block(q0, q1, k0, k1).contiguous()
        q_blk, hidden = q[:, :, q0:q1], ~allowed[..., q0:q1, m0:m1]
        if rows_reversed:
            q_blk, hidden = q_blk.flip(2), hidden.flip(-2)
        mask[..., m0 - k0:m1 - k0].masked_fill_(hidden, float("-inf"))
        # 4-D: torch's CPU SDPA takes its fused (flash) path only for a 4-D mask; a 3-D one falls back to the
        # unfused math path, which builds the block's probabilities in several more passes
        mask = mask[None] if mask.dim() == 3 else mask
        out = F.scaled_dot_product_attention(q_blk, k[:, :, k0:k1], v[:, :, k0:k1], attn_mask=mask)
        out_BHTK[:, :, q0:q1] = out.flip(2) if rows_reversed else out
    return out_BHTK.to(q_BHTK.dtype)


def distance_grid(table_HS: torch.Tensor, T: int, S: int) -> torch.Tensor:
    """(H, T, S) float32, a copy: the bias of a whole call from its table by distance (query t at key position
    S - T + t), future keys reading distance 0 (the caller masks them) and distances past the table's end its
    last entry (a caller's columns before key 0, which it never passes on)."""
    d_TS = (S - T) + torch.arange(T, device=table_HS.device)[:, None] - torch.arange(S, device=table_HS.device)[None]
    return table_HS[:, d_TS.clamp(0, table_HS.shape[-1] - 1)]


def one_block_attention(q_BHTK: torch.Tensor, k_BHSK: torch.Tensor, v_BHSK: torch.Tensor,
                        bias_HTS: torch.Tensor) -> torch.Tensor:
    """`blocked_bias_attention` of a causal call whose whole (H, T, S) bias is one block (H x T x S <=
    BLOCK_ELEMENTS: decoding steps, short prompts), given whole (`bias_HTS`, natural row order, ours to write):
    -inf over each query's future and SDPA called once, without the block machinery's spans and views, whose
    ~20 small torch calls per layer were a third of a decoding step's attention. Query t at key position S - T + t."""
    T, S = q_BHTK.shape[-2], k_BHSK.shape[-2]
    if T > 1:  # one query (a decoding step) sees every key
        bias_HTS.masked_fill_(~causal_mask(T, S, bias_HTS.device), float("-inf"))
    out = F.scaled_dot_product_attention(q_BHTK.float(), k_BHSK.float(), v_BHSK.float(), attn_mask=bias_HTS[None])
    return out.to(q_BHTK.dtype)
