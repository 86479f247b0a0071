"""Rotary position embeddings (Su et al. 2021, RoFormer eq. 34) and variants that change which
frequencies rotate: learnable frequencies (lrope) and p-RoPE (Barbero et al. 2025, "Round and
Round We Go!": the lowest frequencies are removed so they carry semantics, not position).

Layout: "rotate half" (GPT-NeoX): channel j pairs with j + K/2 at frequency inv_F[j mod K/2].

Partial rotary (`pe.rotary_fraction`, GPT-NeoX's `rotary_pct`, transformers' `partial_rotary_factor`): only the
first R = int(K * fraction) channels of each head rotate, as R-dimensional RoPE (frequencies theta^(-2i/R),
channel j pairs with j + R/2); the other K - R channels pass unrotated. An option of every rotary PE rather
than a PE of its own because it is a separate axis: GPT-NeoX, Phi and Qwen3-Next combine it with any
frequency rule and any length extension, and transformers treats it as a parameter of every rope type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from posbench.config_loader import require
from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PEConfig, PositionalEncoding
from posbench.pe.rope_scaling import NoScaling, ScalingConfig, build_scaling


def rope_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    """inv_F[i] = theta^(-2i/K), i = 0..K/2-1 (RoFormer section 3.2.2)."""
    return theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x_BHTK, cos_TK, sin_TK):
    """Rotation computed in float32 (positions and angles must not be bf16), cast back."""
    xf = x_BHTK.float()
    return (xf * cos_TK + rotate_half(xf) * sin_TK).to(x_BHTK.dtype)


def rotary_dim(head_dim: int, fraction: float) -> int:
    """Channels that rotate: int(K * fraction), truncated as transformers' `int(head_dim * partial_rotary_factor)`."""
    return int(head_dim * fraction)


@dataclass
class RopeConfig(PEConfig):
    theta: float = 10000.0
    scaling: ScalingConfig = field(default_factory=NoScaling.Config)
    rotary_fraction: float = 1.0  # share of each head's channels that rotate (the first ones); 1.0: all

    def check(self) -> None:
        if not self.theta > 1:
            raise ConfigError(f"pe.theta must be > 1, got {self.theta}")
        if not 0.0 < self.rotary_fraction <= 1.0:
            raise ConfigError(f"pe.rotary_fraction must be in (0, 1], got {self.rotary_fraction}")


def require_channel_pairs(cfg, ctx) -> None:
    """A PE that rotates channel pairs needs an even integer head dim (ConfigError naming the model's sizes)."""
    require(ctx.d_model % ctx.n_heads == 0 and ctx.head_dim % 2 == 0,
            f"`{cfg.name}` rotates channel pairs: head dim model.d_model/model.n_heads = "
            f"{ctx.d_model}/{ctx.n_heads} must be an even integer")


class RotaryBase(PositionalEncoding):
    kind = "rotary"
    Config = RopeConfig

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.register_buffer("inv_freq_base", self.initial_inv_freq(), persistent=False)
        self.set_scaling(cfg.scaling)

    @classmethod
    def check_model(cls, cfg, ctx):
        require_channel_pairs(cfg, ctx)
        R = rotary_dim(ctx.head_dim, cfg.rotary_fraction)
        require(R >= 2 and R % 2 == 0,
                f"`{cfg.name}` rotates int(head dim {ctx.head_dim} x pe.rotary_fraction {cfg.rotary_fraction}) = "
                f"{R} channels, which must be an even number >= 2; choose a fraction giving an even count")
        build_scaling(cfg.scaling, ctx.seq_len).check_frequencies(R // 2)

    @property
    def rotary_dim(self) -> int:
        return rotary_dim(self.ctx.head_dim, self.cfg.rotary_fraction)

    def initial_inv_freq(self) -> torch.Tensor:
        return rope_inv_freq(self.rotary_dim, self.cfg.theta)

    def inv_freq(self) -> torch.Tensor:
        return self.inv_freq_base

    def set_scaling(self, scaling: ScalingConfig) -> None:
        """Change the length-extension method, e.g. at evaluation time; weights are unaffected. `scaling_config` is
        the one in effect; `cfg.scaling` stays what the PE was built (and trained) with, as configs are never
        changed after construction."""
        self.scaling_config = scaling
        self.scaling = build_scaling(scaling, self.ctx.seq_len)
        self.scaling.check_frequencies(self.rotary_dim // 2)

    def cos_sin(self, pos_T):
        """(T, R) cos and sin for positions (T,); (B, 1, T, K), broadcasting over heads, for per-row (B, T)."""
        inv_F, mscale = self.scaling.transform(self.inv_freq().float(), pos_T)
        angle_TF = pos_T.float()[..., None] * inv_F[None, :]
        angle_TK = torch.cat((angle_TF, angle_TF), dim=-1)
        if angle_TK.dim() == 3:
            angle_TK = angle_TK[:, None]
        return angle_TK.cos() * mscale, angle_TK.sin() * mscale

    def rotate(self, q_BHTK, k_BHTK, pos_T):
        R = self.rotary_dim
        if R == q_BHTK.shape[-1]:  # the whole head rotates: no slicing, the code path of plain RoPE
            return self.rotate_rotary(q_BHTK, k_BHTK, pos_T)
        q_rot, k_rot = self.rotate_rotary(q_BHTK[..., :R], k_BHTK[..., :R], pos_T)
        return torch.cat((q_rot, q_BHTK[..., R:]), dim=-1), torch.cat((k_rot, k_BHTK[..., R:]), dim=-1)

    def rotate_rotary(self, q_BHTR, k_BHTR, pos_T):
        """Rotate the R rotary channels (all K unless pe.rotary_fraction < 1)."""
        cos_TR, sin_TR = self.cos_sin(pos_T)
        return apply_rotary(q_BHTR, cos_TR, sin_TR), apply_rotary(k_BHTR, cos_TR, sin_TR)


@PES.register("rope")
class RoPE(RotaryBase):
    summary = ("Rotary embeddings (RoFormer); length extension pi/ntk/dynamic/yarn/yarn_paper/llama3/longrope via "
               "pe.scaling, partial rotary via pe.rotary_fraction")


@PES.register("lrope")
class LearnableRoPE(RotaryBase):
    summary = "RoPE with learnable per-frequency rates initialised from RoPE's"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.inv_freq_param = nn.Parameter(self.initial_inv_freq())

    def inv_freq(self):
        return self.inv_freq_param


@PES.register("prope")
class PartialRoPE(RotaryBase):
    summary = "p-RoPE: only the highest `kept_frequencies` share of frequencies rotate; the rest are position-free"

    @dataclass
    class Config(RopeConfig):
        # the share of RoPE's frequencies that keep rotating, the highest (Barbero et al.'s p); every channel stays,
        # the lowest frequencies' pairs are not rotated. Not `rotary_fraction`, which rotates fewer channels with
        # frequencies rebuilt over them
        kept_frequencies: float = 0.75
        replaced_keys: ClassVar[dict[str, str]] = {
            "fraction": "p-RoPE's share of rotating frequencies is pe.kept_frequencies (pe.rotary_fraction is "
                        "the share of channels that rotate, another thing)"}

        def check(self) -> None:
            super().check()
            if not 0.0 <= self.kept_frequencies <= 1.0:
                raise ConfigError(f"pe.kept_frequencies must be in [0, 1], got {self.kept_frequencies}")

    def initial_inv_freq(self):
        inv_F = super().initial_inv_freq()
        keep = round(self.cfg.kept_frequencies * inv_F.shape[0])
        inv_F[keep:] = 0.0  # zero frequency: angle 0 at every position, the pair is not rotated
        return inv_F
