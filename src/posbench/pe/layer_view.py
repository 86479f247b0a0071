"""A per-layer view of a PE whose layers differ (FoPE per layer, GRAPE-M): `layer_pe(layer)` returns one.

The view holds no tensors and is no submodule of its owner (the model's `pe`): state dict, device moves and RoPE
scaling stay on the owner, and the view reads the owner's tensors for its layer.
"""

from __future__ import annotations


class LayerView:
    """Mixin before a PositionalEncoding base: `owner`, `layer`, and the owner's name."""

    def __init__(self, owner, layer: int):
        super().__init__(owner.cfg, owner.ctx)
        object.__setattr__(self, "owner", owner)  # a plain reference: registering it would nest the owner in here
        self.layer = layer

    @property
    def name(self) -> str:
        return self.owner.name
