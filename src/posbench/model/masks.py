"""Which keys a query may attend to: the one definition of causality and of the sliding window, shared by every
kernel (model/kernels.py) and by a batch's document mask (model/packing.py).

Shape legend: T query length, S key length (S >= T with a KV cache). Causality is bottom-right aligned: query t
sits at key index S - T + t. With a sliding window W (Beltagy et al. 2020, Longformer; Jiang et al. 2023, Mistral)
query i sees keys i-W+1 .. i: the last W keys, its own included; W = None is full causal attention.
"""

from __future__ import annotations

import torch


def causal_mask(T: int, S: int, device, window: int | None = None) -> torch.Tensor:
    """(T, S) bool, True where attention is allowed."""
    allowed = torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)
    if window is not None:
        allowed = allowed.triu(diagonal=S - T - window + 1)
    return allowed


def chunk_mask(T: int, S: int, device, chunk: int) -> torch.Tensor:
    """(T, S) bool, True where the query's key index and the key's fall in the same chunk of `chunk` keys (chunked
    local attention, Llama 4: key index j in chunk j // chunk); `causal_mask` & this is the chunked causal rule."""
    q_chunk = torch.arange(S - T, S, device=device)[:, None] // chunk
    return q_chunk == torch.arange(S, device=device)[None, :] // chunk


def window_mask_mod(offset: int, window: int | None, chunk: int | None = None):
    """FlexAttention's mask_mod of `causal_mask` (the same rule), for keys `offset` = S - T ahead of the queries;
    with `chunk`, also `chunk_mask`'s."""
    if chunk is not None:
        unchunked = window_mask_mod(offset, window)
        return lambda b, h, q, kv: unchunked(b, h, q, kv) & ((q + offset) // chunk == kv // chunk)
    if window is None:
        return lambda b, h, q, kv: q + offset >= kv
    return lambda b, h, q, kv: (q + offset >= kv) & (q + offset - kv < window)
