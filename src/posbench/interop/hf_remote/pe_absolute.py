"""The absolute PEs of posbench's remote code (torch only): tables added to the token embeddings (`embed`):
sinusoidal, sine-only, binary/decimal digits, integer, and learned tables. Shapes as in pe_contract.py.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .pe_contract import PositionalEncoding, register


class Table(PositionalEncoding):
    """Adds scale * table(pos) to the token embeddings; scale None means the variant's default."""

    options = frozenset(("scale",))
    default_scale = 1.0

    def table(self, pos_BT):
        raise NotImplementedError

    def embed(self, x_BTD, pos_BT):
        scale = self.cfg["scale"] if self.cfg.get("scale") is not None else self.default_scale
        return x_BTD + (self.table(pos_BT.float()) * scale).to(x_BTD.dtype)


@register("sinusoidal")
class Sinusoidal(Table):
    options = Table.options | {"base"}

    @property
    def default_scale(self):  # a table with per-channel RMS init_std, as loud as the token embeddings
        return self.ctx.init_std * math.sqrt(2)

    def table(self, pos_BT):
        d = self.ctx.d_model
        i = torch.arange(0, d, 2, device=pos_BT.device, dtype=torch.float32)
        angle_BTF = pos_BT[..., None] * self.cfg["base"] ** (-i / d)
        out = torch.empty(*pos_BT.shape, d, device=pos_BT.device, dtype=torch.float32)
        out[..., 0::2], out[..., 1::2] = torch.sin(angle_BTF), torch.cos(angle_BTF)
        return out


@register("sinonly")
class SineOnly(Sinusoidal):
    def table(self, pos_BT):
        d = self.ctx.d_model
        i = torch.arange(d, device=pos_BT.device, dtype=torch.float32)
        return torch.sin(pos_BT[..., None] * self.cfg["base"] ** (-i / d))


@register("binary", "binary_norm", "decimal", "decimal_norm")
class Digits(Table):
    """layout `ours`: digit j of the position (least significant first) in channel j, `_norm` mapped to
    [-1, 1] / sqrt(n). layout `reference`: most significant first across all d_model channels (the last
    channel holds the lowest digit), `_norm` mapped to [-1, 1] with no 1/sqrt(n)."""

    options = Table.options | {"n_digits", "layout"}
    EXACT_POSITIONS = 2**24  # float32 positions are exact integers below this: no higher digit is ever nonzero

    @property
    def digit_base(self):
        return 2 if self.cfg["name"].startswith("binary") else 10

    @property
    def reference(self) -> bool:
        layout = self.cfg.get("layout", "ours")
        if layout not in ("ours", "reference"):
            raise ValueError(f"pe.layout={layout!r} is not implemented by posbench's remote code")
        return layout == "reference"

    @property
    def max_positions(self):
        if self.reference:
            return min(self.digit_base ** min(self.ctx.d_model, 32), self.EXACT_POSITIONS)
        return self.digit_base ** self.cfg["n_digits"]

    def digits(self, pos_BT, n):
        p = pos_BT.long()
        return ((p[..., None] // self.digit_base ** torch.arange(n, device=p.device)) % self.digit_base).float()

    def to_unit(self, digits):
        return 2 * digits / (self.digit_base - 1) - 1

    def table(self, pos_BT):
        d, norm = self.ctx.d_model, self.cfg["name"].endswith("_norm")
        out = torch.zeros(*pos_BT.shape, d, device=pos_BT.device, dtype=torch.float32)
        if self.reference:
            n = min(d, math.ceil(math.log(self.EXACT_POSITIONS, self.digit_base)))
            out[..., d - n:] = self.digits(pos_BT, n).flip(-1)
            return self.to_unit(out) if norm else out
        n = self.cfg["n_digits"]
        digits_BTN = self.digits(pos_BT, n)
        out[..., :n] = self.to_unit(digits_BTN) / n ** 0.5 if norm else digits_BTN
        return out


@register("integer")
class Integer(Table):
    options = Table.options | {"max_positions"}

    @property
    def max_positions(self):
        return self.cfg.get("max_positions") or self.ctx.seq_len

    def table(self, pos_BT):
        return (pos_BT / self.max_positions)[..., None].expand(*pos_BT.shape, self.ctx.d_model)


@register("learned", "sininit")
class Learned(PositionalEncoding):
    """A learned table of max_positions vectors (sininit: trained from the sinusoidal table)."""

    options = frozenset(("max_positions", "scale", "layer_norm", "init_std"))

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.table = nn.Embedding(self.max_positions, ctx.d_model)
        self.norm = nn.LayerNorm(ctx.d_model) if cfg.get("layer_norm") else nn.Identity()

    @property
    def max_positions(self):
        return self.cfg.get("max_positions") or self.ctx.seq_len

    def embed(self, x_BTD, pos_BT):
        return self.norm(x_BTD + (self.table(pos_BT.long()) * self.cfg["scale"]).to(x_BTD.dtype))
