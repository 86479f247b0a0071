"""`model.attention_gate`: a sigmoid gate on each head's attention output, before the output projection
(Qiu et al. 2025, "Gated Attention for Large Language Models": their G1 position, the one Qwen3-Next ships).

    none         no gate: the plain attention block, with no parameter of its own
    elementwise  out[b, t, h, k] * sigmoid(x W_g)[b, t, h, k]: one gate per channel of every head, W_g (D, D)
                 (Qiu et al.'s best variant; Qwen3-Next's q_proj emits it beside each head's query)
    headwise     out[b, t, h, :] * sigmoid(x W_g)[b, t, h]: one gate per head, W_g (D, H)

The gate reads the block's normed input `x`, the same input as q, k and v. It acts after the kernel, so every
kernel, the KV cache (the gate of a new token reads only that token) and document packing carry it unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

from posbench.registry import Registry

GATES = Registry("attention gate", where="model.attention_gate")


@GATES.register("none")
class NoGate(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()

    def linears(self) -> list[nn.Linear]:
        """The gate's weights, initialised as the block's other input projections (model/init.py)."""
        return []

    def forward(self, x_BTD, out_BTHK):
        return out_BTHK


@GATES.register("elementwise")
class ElementwiseGate(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def linears(self) -> list[nn.Linear]:
        return [self.proj]

    def forward(self, x_BTD, out_BTHK):
        return out_BTHK * torch.sigmoid(self.proj(x_BTD)).view(out_BTHK.shape)


@GATES.register("headwise")
class HeadwiseGate(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.proj = nn.Linear(d_model, n_heads, bias=False)

    def linears(self) -> list[nn.Linear]:
        return [self.proj]

    def forward(self, x_BTD, out_BTHK):
        return out_BTHK * torch.sigmoid(self.proj(x_BTD))[..., None]
