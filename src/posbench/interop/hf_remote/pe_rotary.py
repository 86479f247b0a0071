"""The rotary PEs of posbench's remote code (torch only): RoPE in the "rotate half" layout and the variants that
change its frequencies or its cos/sin tables (DroPE, learned, partial, modded, HoPE, FoPE, xPos), and PoPE.
Shapes as in pe_contract.py; R the rotated channels of a head (partial rotary), F = R/2 frequencies.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .pe_contract import PositionalEncoding, register
from .pe_rope_scaling import SCALINGS, check_scaling


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x_BHTK, cos_BTK, sin_BTK):
    xf = x_BHTK.float()
    return (xf * cos_BTK[:, None] + rotate_half(xf) * sin_BTK[:, None]).to(x_BHTK.dtype)


@register("rope")
class Rotary(PositionalEncoding):
    """RoFormer rotation, "rotate half" layout over the first R = int(K * rotary_fraction) channels: channel j
    pairs with j + R/2 at frequency inv_F[j mod R/2]; channels R.. pass unrotated (partial rotary)."""

    options = frozenset(("theta", "scaling", "rotary_fraction"))
    nested = {"scaling": check_scaling}

    @property
    def pads_ok(self):
        # dynamic NTK and LongRoPE set every frequency from the longest position in the call: rows of one padded
        # batch would each need their own
        return (self.cfg.get("scaling") or {}).get("name", "none") not in ("dynamic", "longrope")

    @property
    def rotary_dim(self) -> int:
        return int(self.ctx.head_dim * self.cfg.get("rotary_fraction", 1.0))

    def inv_freq(self):
        R = self.rotary_dim
        return self.cfg["theta"] ** (-torch.arange(0, R, 2, dtype=torch.float32) / R)

    def cos_sin(self, pos_BT):
        s = self.cfg.get("scaling") or {"name": "none"}
        original = s.get("original_max_positions") or self.ctx.seq_len
        inv_F, mscale = SCALINGS[s["name"]][1](self.inv_freq().float().to(pos_BT.device), pos_BT, s, original)
        angle_BTF = pos_BT.float()[..., None] * inv_F
        angle_BTK = torch.cat((angle_BTF, angle_BTF), dim=-1)
        return angle_BTK.cos() * mscale, angle_BTK.sin() * mscale

    def rotate(self, q_BHTK, k_BHTK, pos_BT):
        R = self.rotary_dim
        q_rot, k_rot = self.rotate_rotary(q_BHTK[..., :R], k_BHTK[..., :R], pos_BT)
        return torch.cat((q_rot, q_BHTK[..., R:]), dim=-1), torch.cat((k_rot, k_BHTK[..., R:]), dim=-1)

    def rotate_rotary(self, q_BHTR, k_BHTR, pos_BT):
        cos_BTR, sin_BTR = self.cos_sin(pos_BT)
        return apply_rotary(q_BHTR, cos_BTR, sin_BTR), apply_rotary(k_BHTR, cos_BTR, sin_BTR)


@register("drope")
class DroppableRotary(Rotary):
    """DroPE: RoPE until training dropped it (`dropped`: true in the checkpoint's config), then no PE at all."""

    options = Rotary.options | {"dropped", "drop_at"}  # drop_at: when training dropped it; no effect here

    def rotate(self, q_BHTK, k_BHTK, pos_BT):
        if self.cfg.get("dropped"):
            return q_BHTK, k_BHTK
        return super().rotate(q_BHTK, k_BHTK, pos_BT)


@register("lrope")
class LearnedRotary(Rotary):
    """RoPE whose per-frequency rates are parameters (trained from RoPE's)."""

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.inv_freq_param = nn.Parameter(torch.zeros(self.rotary_dim // 2))

    def inv_freq(self):
        return self.inv_freq_param


@register("prope")
class PartialRotary(Rotary):
    """p-RoPE: the lowest (1 - kept_frequencies) of the frequencies are zero, i.e. not rotated."""

    options = Rotary.options | {"kept_frequencies"}

    def inv_freq(self):
        inv_F = super().inv_freq()
        inv_F[round(self.cfg["kept_frequencies"] * inv_F.shape[0]):] = 0.0
        return inv_F


@register("modded_rope")
class ModdedRotary(Rotary):
    """modded-nanogpt's half-truncated RoPE: R/4 frequencies (1/theta)^linspace(0, 1, R/4), then R/4 zeros."""

    def inv_freq(self):
        quarter = self.rotary_dim // 4
        inv_F = (1.0 / self.cfg["theta"]) ** torch.linspace(0, 1, steps=quarter, dtype=torch.float32)
        return torch.cat((inv_F, inv_F.new_zeros(quarter)))


@register("hope")
class HighFrequencyRotary(Rotary):
    """HoPE: frequencies without a full period within the training length are zero (position-free)."""

    def inv_freq(self):
        inv_F = super().inv_freq()
        return torch.where(inv_F * self.ctx.seq_len >= 2 * math.pi, inv_F, torch.zeros_like(inv_F))


@register("fope")
class FourierRotary(Rotary):
    """FoPE: the D frequencies with a full period within the training length are mixed per head into d = min(D,
    K/4) slots by fixed (H, D, d) matrices (from the checkpoint), cos and sin each with its own; the other slots
    are zero frequency (cos 1, sin 0). `fourier_shared`: one pair for every layer, else one per layer (L, H, D, d),
    each layer's through `layer_pe`."""

    # the gain and the column normalisation only drew the matrices, which come with the weights
    options = Rotary.options | {"fourier_gain", "fourier_norm", "fourier_shared"}

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        R, theta = self.rotary_dim, cfg["theta"]  # Python floats: transformers builds the model on the meta device
        self.n_in = sum(theta ** (-2 * i / R) * ctx.seq_len >= 2 * math.pi for i in range(R // 2))
        self.n_out = min(self.n_in, ctx.head_dim // 4) if self.n_in else 0
        sets = () if cfg["fourier_shared"] else (ctx.n_layers,)
        self.register_buffer("cos_coef", torch.zeros(*sets, ctx.n_heads, self.n_in, self.n_out))
        self.register_buffer("sin_coef", torch.zeros(*sets, ctx.n_heads, self.n_in, self.n_out))
        # plain list, not submodules: the buffers load once, under `pe`
        self.layer_views = [] if cfg["fourier_shared"] else [FourierLayer(self, i) for i in range(ctx.n_layers)]

    def layer_pe(self, layer):
        return self.layer_views[layer] if self.layer_views else self

    def cos_sin(self, pos_BT, layer=0):
        cos_c, sin_c = (self.cos_coef, self.sin_coef) if self.cos_coef.dim() == 3 else \
            (self.cos_coef[layer], self.sin_coef[layer])
        s = self.cfg.get("scaling") or {"name": "none"}
        original = s.get("original_max_positions") or self.ctx.seq_len
        inv_F, mscale = SCALINGS[s["name"]][1](self.inv_freq().float().to(pos_BT.device), pos_BT, s, original)
        angle_BTD = pos_BT.float()[..., None] * inv_F[: self.n_in]
        cos_BHTd = torch.einsum("btD,hDd->bhtd", angle_BTD.cos(), cos_c.float())
        sin_BHTd = torch.einsum("btD,hDd->bhtd", angle_BTD.sin(), sin_c.float())
        pad = self.rotary_dim // 2 - self.n_out
        cos_BHTF = F.pad(cos_BHTd, (0, pad), value=1.0)
        sin_BHTF = F.pad(sin_BHTd, (0, pad), value=0.0)
        return torch.cat((cos_BHTF, cos_BHTF), dim=-1) * mscale, torch.cat((sin_BHTF, sin_BHTF), dim=-1) * mscale

    def rotate(self, q_BHTK, k_BHTK, pos_BT, layer=0):
        R = self.rotary_dim
        cos_BHTR, sin_BHTR = self.cos_sin(pos_BT, layer)  # per head already: no head axis to add

        def rot(x):
            xf = x.float()
            return (xf * cos_BHTR + rotate_half(xf) * sin_BHTR).to(x.dtype)
        return (torch.cat((rot(q_BHTK[..., :R]), q_BHTK[..., R:]), dim=-1),
                torch.cat((rot(k_BHTK[..., :R]), k_BHTK[..., R:]), dim=-1))


class FourierLayer(PositionalEncoding):
    """Layer `layer` of a per-layer FoPE: the owner's rotation with that layer's matrices (it holds no tensors)."""

    def __init__(self, owner, layer):
        super().__init__(owner.cfg, owner.ctx)
        object.__setattr__(self, "owner", owner)  # a plain reference, not a submodule
        self.layer = layer

    @property
    def pads_ok(self):
        return self.owner.pads_ok

    def rotate(self, q_BHTK, k_BHTK, pos_BT):
        return self.owner.rotate(q_BHTK, k_BHTK, pos_BT, self.layer)


@register("xpos")
class XPos(Rotary):
    """RoPE with q scaled by zeta^(n/B) and k by zeta^(-m/B): q.k decays by zeta^((n-m)/B) per frequency."""

    options = Rotary.options | {"gamma", "scale_base"}

    def rotate_rotary(self, q_BHTK, k_BHTK, pos_BT):
        cos_BTK, sin_BTK = self.cos_sin(pos_BT)
        K = self.rotary_dim
        zeta_F = (torch.arange(0, K, 2, device=pos_BT.device, dtype=torch.float32) / K + self.cfg["gamma"]) \
            / (1 + self.cfg["gamma"])
        scale_BTF = zeta_F ** (pos_BT.float()[..., None] / self.cfg["scale_base"])
        scale_BTK = torch.cat((scale_BTF, scale_BTF), dim=-1)
        return (apply_rotary(q_BHTK, cos_BTK * scale_BTK, sin_BTK * scale_BTK),
                apply_rotary(k_BHTK, cos_BTK / scale_BTK, sin_BTK / scale_BTK))


@register("pope")
class PolarRotary(PositionalEncoding):
    """PoPE: channel c of q/k becomes the complex number softplus(x_c) e^(i pos theta_c), theta_c = theta^(-c/K),
    keys with a learned phase bias clamped to [-2 pi, 0], written as 2K real channels [mu cos, mu sin]: the
    attention's q.k / sqrt(K) is then sum_c mu_q mu_k cos((s - t) theta_c + delta_c) / sqrt(K)."""

    options = frozenset(("theta",))

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.phase_bias = nn.Parameter(torch.zeros(ctx.n_heads, 1, ctx.head_dim))

    def rotate(self, q_BHTK, k_BHTK, pos_BT):
        K = self.ctx.head_dim
        inv_K = self.cfg["theta"] ** (-torch.arange(K, dtype=torch.float32, device=pos_BT.device) / K)
        phase_B1TK = (pos_BT.float()[..., None] * inv_K)[:, None]
        delta_H1K = self.phase_bias.float().clamp(-2 * math.pi, 0.0)

        def polar(x, phase):
            mu = F.softplus(x.float())
            return torch.cat((mu * phase.cos(), mu * phase.sin()), dim=-1).to(x.dtype)
        return polar(q_BHTK, phase_B1TK), polar(k_BHTK, phase_B1TK + delta_H1K)
