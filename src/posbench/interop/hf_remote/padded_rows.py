"""A left-padded batch row by row in posbench's remote code (torch only), each row on its real tokens only (keep_BT:
True on them): what the row computes alone, whatever the PE reads besides a token's own position (dynamic RoPE
scaling's longest position, PaTH's convolution over the tokens before). Pads get zeros (they are masked out of
attention)."""

from __future__ import annotations

import torch


def rows_positions(pe, keep_BS: torch.Tensor) -> torch.Tensor:
    """(B, S) float32: each row's positions, as posbench's `positions` gives a sequence of its real tokens."""
    pos_BS = torch.zeros(keep_BS.shape, dtype=torch.float32, device=keep_BS.device)
    for b, real in enumerate(keep_BS):
        pos_BS[b, real] = pe.positions(int(real.sum()), keep_BS.device, 0)
    return pos_BS


def rows_rotate(pe, q_BHTK, k_BHTK, pos_BT, keep_BT):
    """pe.rotate, per row when padded (its q and k may be wider than the head: qk_dim)."""
    if keep_BT is None:
        return pe.rotate(q_BHTK, k_BHTK, pos_BT)
    q_out = k_out = None
    for b, real in enumerate(keep_BT):
        q_b, k_b = pe.rotate(q_BHTK[b:b + 1, :, real], k_BHTK[b:b + 1, :, real], pos_BT[b:b + 1, real])
        if q_out is None:
            q_out, k_out = (t.new_zeros(*q_BHTK.shape[:3], t.shape[-1]) for t in (q_b, k_b))
        q_out[b:b + 1, :, real], k_out[b:b + 1, :, real] = q_b, k_b
    return q_out, k_out


def rows_features(pe, layer: int, x_BTD, keep_BT):
    """pe.token_features, per row when padded: (B, H, T), (B, H, F, T) or None."""
    if keep_BT is None:
        return pe.token_features(layer, x_BTD)
    out = None
    for b, real in enumerate(keep_BT):
        f = pe.token_features(layer, x_BTD[b:b + 1, real])
        if f is None:
            return None
        if out is None:
            out = f.new_zeros(x_BTD.shape[0], *f.shape[1:-1], x_BTD.shape[1])
        out[b:b + 1, ..., real] = f
    return out
