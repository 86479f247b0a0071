"""FoPE, Fourier Position Embedding (Hua et al., ICML 2025, arXiv 2412.17739, section 4; authors' code
TsinghuaC3I/Fourier-Position-Embedding, `FourierEmbedding` in olmo/model.py, defaults in olmo/config.py).

Two changes to RoPE (R rotary channels, F = R/2 frequencies theta^(-2i/R)):
1. Clipping: frequencies below 2 pi / L (no full period within the training length L) are under-trained; they
   become zero frequency (cos 1, sin 0: the pair is position-free). The D kept frequencies feed step 2.
2. Fourier series: each of d = min(D, K/4) output slots is a mixture of all D kept frequencies,
     cos_h,j(n) = sum_i C_h[i, j] cos(w_i n),   sin likewise with its own S_h,
   C_h = I + N (d = D) or a "step identity" (slot j's dominant frequency is w_{j*ceil(D/d)}) + N, with N drawn by
   xavier_normal(gain sigma = 0.3) over the (H, D, d) tensor, one matrix per head, fixed (not trained). Slots
   d..F-1 are zero frequency. The pair (j, j + R/2) rotates by the mixed cos/sin.

As the authors' defaults: the columns are used as drawn (their `fourier_norm` is False, olmo/config.py:454;
`pe.fourier_norm=true` divides each column by its sum, their option, done once here since the matrices are fixed),
and every layer draws its own matrices (they build a FourierEmbedding in every OLMoBlock, olmo/model.py:1001;
`pe.fourier_shared=true` gives one set to all layers). The shared set keeps the (H, D, d) buffers of checkpoints
written before these options existed (one set, normalised); per-layer sets are (L, H, D, d).

Differences from the authors' forward (pe_defaults.md): the padded slots there get cos 1 *and* sin 1, which
doubles those channels' contribution to q.k; we use the paper's zero frequency (cos 1, sin 0). The mixture is
not a rotation by one angle, so q.k is not exactly a function of the distance: `is_relative` is False.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PositionalEncoding
from posbench.pe.layer_view import LayerView
from posbench.pe.rope import RopeConfig, RotaryBase, apply_rotary
from posbench.pe.speed import PESpeed


def fope_coefficients(n_heads: int, n_in: int, n_out: int, gain: float, generator=None) -> torch.Tensor:
    """(H, D, d) mixing matrix: identity (or step identity when d < D) plus xavier-normal noise of `gain`."""
    fan_in, fan_out = n_in * n_out, n_heads * n_out  # torch's fans for a 3-D (H, D, d) tensor
    noise = torch.randn(n_heads, n_in, n_out, generator=generator) * gain * math.sqrt(2.0 / (fan_in + fan_out))
    step = math.ceil(n_in / n_out)
    eye = torch.zeros(n_in, n_out)
    for j in range(n_out):
        if j * step < n_in:
            eye[j * step, j] = 1.0
    return noise + eye


def n_kept_frequencies(rotary_dim: int, theta: float, train_len: int) -> int:
    """How many of the R/2 frequencies theta^(-2i/R) (falling with i) turn at least once within `train_len`;
    in Python floats, so that a model built on the meta device counts the same."""
    return sum(theta ** (-2 * i / rotary_dim) * train_len >= 2 * math.pi for i in range(rotary_dim // 2))


@PES.register("fope")
class FoPE(RotaryBase):
    summary = "FoPE: each channel pair a Fourier series of RoPE's frequencies; sub-2pi/L frequencies clipped to zero"

    @dataclass
    class Config(RopeConfig):
        fourier_gain: float = 0.3  # xavier_normal gain of the extra-frequency coefficients (authors' default)
        fourier_norm: bool = False  # divide each coefficient column by its sum (authors' option, off by default)
        fourier_shared: bool = False  # one coefficient set for all layers (the authors draw one per layer)

        def check(self) -> None:
            super().check()
            if not 0 <= self.fourier_gain < math.inf:  # inf would make every coefficient inf: divergence at step 1
                raise ConfigError(f"pe.fourier_gain must be a finite number >= 0, got {self.fourier_gain}")

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.n_in = n_kept_frequencies(self.rotary_dim, cfg.theta, ctx.seq_len)
        self.n_out = min(self.n_in, ctx.head_dim // 4) if self.n_in else 0
        sets = [self.draw() for _ in range(1 if cfg.fourier_shared else ctx.n_layers)]
        cos_c, sin_c = (torch.stack(s) for s in zip(*sets, strict=True))  # (S, H, D, d), S sets
        if cfg.fourier_shared:  # (H, D, d): the layout of every FoPE checkpoint written before per-layer sets
            cos_c, sin_c = cos_c[0], sin_c[0]
        self.register_buffer("cos_coef", cos_c)
        self.register_buffer("sin_coef", sin_c)
        # a per-layer view each; a plain list, not submodules: the tensors stay here, saved and moved once as `pe`
        self.layer_views = [] if cfg.fourier_shared else [FoPELayer(self, i) for i in range(ctx.n_layers)]

    def draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One (cos, sin) pair of (H, D, d) matrices, cos drawn first; columns divided by their sums with
        pe.fourier_norm (once: the matrices are fixed buffers, so the authors' division at every call is the same)."""
        shape = (self.ctx.n_heads, self.n_in, self.n_out)
        pair = [fope_coefficients(*shape, self.cfg.fourier_gain) if self.n_in else torch.zeros(shape)
                for _ in range(2)]
        return tuple(c / c.sum(dim=1, keepdim=True) if self.cfg.fourier_norm else c for c in pair)

    @property
    def is_relative(self) -> bool:
        return False

    def layer_pe(self, layer):
        return self.layer_views[layer] if self.layer_views else self

    def coefficients(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The (H, D, d) cos and sin matrices layer `layer` mixes with."""
        if self.cos_coef.dim() == 3:  # one shared set
            return self.cos_coef, self.sin_coef
        return self.cos_coef[layer], self.sin_coef[layer]

    def cos_sin(self, pos_T, layer: int = 0):
        """(H, T, R) cos and sin for positions (T,); (B, H, T, R) for per-row (B, T)."""
        cos_c, sin_c = self.coefficients(layer)
        inv_F, mscale = self.scaling.transform(self.inv_freq().float(), pos_T)
        angle_TD = pos_T.float()[..., None] * inv_F[: self.n_in]
        cos_HTd = torch.einsum("...tD,hDd->...htd", angle_TD.cos(), cos_c.float())
        sin_HTd = torch.einsum("...tD,hDd->...htd", angle_TD.sin(), sin_c.float())
        pad = self.rotary_dim // 2 - self.n_out  # zero-frequency slots: cos 1, sin 0
        cos_HTF = torch.nn.functional.pad(cos_HTd, (0, pad), value=1.0)
        sin_HTF = torch.nn.functional.pad(sin_HTd, (0, pad), value=0.0)
        return torch.cat((cos_HTF, cos_HTF), dim=-1) * mscale, torch.cat((sin_HTF, sin_HTF), dim=-1) * mscale

    def rotate(self, q_BHTK, k_BHTK, pos_T, layer: int = 0):
        """RotaryBase's rotation (the first R channels) with layer `layer`'s matrices; layer 0's when called on
        the PE itself, which is every layer's with pe.fourier_shared."""
        cos_TR, sin_TR = self.cos_sin(pos_T, layer)
        R = self.rotary_dim
        if R == q_BHTK.shape[-1]:
            return apply_rotary(q_BHTK, cos_TR, sin_TR), apply_rotary(k_BHTK, cos_TR, sin_TR)
        q_rot, k_rot = apply_rotary(q_BHTK[..., :R], cos_TR, sin_TR), apply_rotary(k_BHTK[..., :R], cos_TR, sin_TR)
        return torch.cat((q_rot, q_BHTK[..., R:]), dim=-1), torch.cat((k_rot, k_BHTK[..., R:]), dim=-1)

    class Speed(PESpeed):
        def layer_flops(self, layer: int, seq_len: int) -> tuple[float, float]:
            # the two (D -> d) mixtures per head, recomputed by every layer's rotate (per position: exact at batch 1,
            # an upper bound per token for larger batches, which share the positions); no backward (fixed buffers)
            mix = 2 * 2 * self.pe.n_in * self.pe.n_out * self.pe.ctx.n_heads
            return float(mix), float(mix)


class FoPELayer(LayerView, PositionalEncoding):
    """Layer `layer` of a per-layer FoPE: the owner's rotation with that layer's matrices. It holds no tensors and is
    no submodule of the owner (the model's `pe`), so state dict, device moves and RoPE scaling stay on the owner."""

    kind = "rotary"

    @property
    def is_relative(self) -> bool:
        return False

    def rotate(self, q_BHTK, k_BHTK, pos_T):
        return self.owner.rotate(q_BHTK, k_BHTK, pos_T, self.layer)

    class Speed(PESpeed):
        """The owner's accounting: a layer view holds no tensors of its own (its rotation's are the owner's)."""

        def qk_dim(self, head_dim: int) -> int:
            return self.pe.owner.speed.qk_dim(head_dim)

        def layer_flops(self, layer: int, seq_len: int) -> tuple[float, float]:
            return self.pe.owner.speed.layer_flops(layer, seq_len)

    def extra_repr(self) -> str:
        return f"name={self.name}, layer={self.layer}"
