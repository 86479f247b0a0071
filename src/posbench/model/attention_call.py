"""The shape of one layer's attention call, which a kernel's `forward_bytes` prices (model/kernels.py) and
model/memory.py builds per layer for evaluation's memory check."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttentionCall:
    """The shape of one layer's attention call, for `forward_bytes`: B rows, H heads, T queries, S keys, K channels
    of v, Q of q and k (the PE's `qk_dim`), `docs`: the batch's documents reach the kernel (model.packing),
    `sinks`: the layer's sink logits do (model.attention_sinks), `tempered`: model.attention_temperature scales the
    layer, whose kernel then gets the bias as a tempered score_mod and no fast form of it."""

    B: int
    H: int
    T: int
    S: int
    K: int
    Q: int
    docs: bool = False
    sinks: bool = False
    tempered: bool = False

    @property
    def scores(self) -> int:
        """Bytes of one float32 (B, H, T, S) matrix."""
        return 4 * self.B * self.H * self.T * self.S

    @property
    def mask(self) -> int:
        """Bytes of the bool allowed mask: (T, S), or (B, 1, T, S) per row with documents."""
        return (self.B if self.docs else 1) * self.T * self.S

    @property
    def out(self) -> int:
        """Bytes of the float32 output (B, H, T, K)."""
        return 4 * self.B * self.H * self.T * self.K
