"""A change of single heads' q and k after the PE has rotated them, set on a layer's attention from outside the
model (evaluation-time options: DoPE, evaluation/dope.py). The model only calls it; `KEEP` (every head as the PE
left it) is what every attention holds unless such an option is applied, so a model without one computes exactly
what it computed before the hook existed.

Shape legend: B batch, H heads, T new tokens, K head dim.
"""

from __future__ import annotations

import torch


class HeadEdit:
    """The identity: q and k as rotated. A subclass returns changed tensors (never edits them in place)."""

    def __call__(self, layer: int, q_in_BHTK: torch.Tensor, k_in_BHTK: torch.Tensor, q_BHTK: torch.Tensor,
                 k_BHTK: torch.Tensor, pos_T: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`q_in`/`k_in`: before the rotation (after QK-norm); `q`/`k`: after it; `pos_T`: the tokens' positions in
        the sequence, (T,) or per row (B, T), cached tokens counted (a decode step's are its absolute positions)."""
        return q_BHTK, k_BHTK


KEEP = HeadEdit()
