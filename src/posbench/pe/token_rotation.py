"""Rotations whose angles are read from the tokens (Selective RoPE, GRAPE-M contextual): query i and key j turn by
angles of their own cumulative phase, so q_i' . k_j' = q_i^T R(phi_j - phi_i) k_j, relative in the phase.

The contract's `rotate(q, k, pos_T)` sees positions only, so these PEs rotate inside `logits_mod`: the keys arrive
unrotated (the KV cache keeps them raw, and each key's phase increment as a token feature), every call rotates the
T new queries and all S keys by the phases of the cached and new tokens and rescores them. A phase that is 0
everywhere leaves q and k as they are (cos 0 = 1, sin 0 = 0), so the kernel's logits come back unchanged.

Shape legend: B batch, H heads, T queries (the last T of the S keys), S keys, K head dim, P = K/2 channel pairs.
"""

from __future__ import annotations

import math

import torch


def rotate_pairs(x_BHSK: torch.Tensor, angle_BHSP: torch.Tensor) -> torch.Tensor:
    """Channel j turns with j + K/2 (rotate half, as pe/rope.py) by +angle[..., j], float32."""
    P = angle_BHSP.shape[-1]
    x0, x1 = x_BHSK[..., :P], x_BHSK[..., P:]
    cos, sin = angle_BHSP.cos(), angle_BHSP.sin()
    return torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)


def rotated_logits(q_BHTK: torch.Tensor, k_BHSK: torch.Tensor, s_BHTS: torch.Tensor,
                   angle_BHSP: torch.Tensor) -> torch.Tensor:
    """The masked logit matrix rescored with q and k rotated by their tokens' angles (the last T for the queries);
    keys the kernel masked (-inf) stay masked. float32, scale 1/sqrt(K) as every kernel's."""
    T, K = q_BHTK.shape[-2], q_BHTK.shape[-1]
    q_rot = rotate_pairs(q_BHTK.float(), angle_BHSP[:, :, angle_BHSP.shape[2] - T:])
    k_rot = rotate_pairs(k_BHSK.float(), angle_BHSP)
    s_new = (q_rot @ k_rot.transpose(-1, -2)) / math.sqrt(K)  # the eager kernel's order: 0 angles, its logits
    return torch.where(s_BHTS.isneginf(), s_BHTS, s_new)


def rotated_logits_bytes(B: int, H: int, T: int, S: int, K: int) -> int:
    """float32 bytes `rotated_logits` holds at its peak beside the matrix it is given: the angles' cos and sin and
    the rotated keys (S x 2K, with the halves before their concatenation), the rotated queries, then the new
    (T, S) logits and the masked result at once."""
    return 4 * B * H * (3 * S * K + 3 * T * K + 2 * T * S)
