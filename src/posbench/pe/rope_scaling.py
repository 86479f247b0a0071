"""RoPE length extension, chosen per run or at evaluation time (`pe.scaling.name=yarn`).

Each method transforms the per-frequency inverse wavelengths inv_F (F = head_dim/2, highest
frequency first) and returns a logit temperature factor applied to cos/sin (so q.k scales by its
square). Written as transforms of inv_F rather than of `theta`, they also apply to learned (lrope)
and truncated (prope) frequencies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from posbench.config_loader import Checked
from posbench.errors import ConfigError
from posbench.registry import Registry


@dataclass
class ScalingConfig(Checked):
    name: str = "none"
    factor: float = 1.0  # target length / training length
    original_max_positions: int | None = None  # None: the model's training length

    def check(self) -> None:
        if self.factor < 1.0:
            raise ConfigError(f"pe.scaling.factor must be >= 1, got {self.factor}")

    @classmethod
    def registry_lookup(cls, name, where="pe.scaling"):
        return SCALINGS.config(name, where)


SCALINGS = Registry("RoPE scaling", where="pe.scaling")


class RopeScaling:
    name: ClassVar[str] = ""
    Config: ClassVar[type[ScalingConfig]] = ScalingConfig

    def __init__(self, cfg: ScalingConfig, train_len: int):
        self.cfg = cfg
        self.factor = cfg.factor
        self.original = cfg.original_max_positions or train_len

    def transform(self, inv_F: torch.Tensor, pos_T: torch.Tensor) -> tuple[torch.Tensor, float]:
        return inv_F, 1.0

    def check_frequencies(self, n_frequencies: int) -> None:
        """Checks that need the number of rotary frequencies (R/2); called by the PE's check_model()."""


@SCALINGS.register("none")
class NoScaling(RopeScaling):
    """The trained frequencies, unchanged."""


@SCALINGS.register("pi")
class PositionInterpolation(RopeScaling):
    """Chen et al. 2023, eq. 4: f'(x, m) = f(x, m / s), i.e. every frequency divided by s."""

    def transform(self, inv_F, pos_T):
        return inv_F / self.factor, 1.0


def ntk_inv_freq(inv_F: torch.Tensor, factor: float) -> torch.Tensor:
    """NTK-aware base change b' = b * s^(d/(d-2)) (bloc97, 2023), as a per-frequency factor:
    b'^(-2i/d) = b^(-2i/d) * s^(-2i/(d-2)) for frequency index i of F = d/2."""
    F = inv_F.shape[0]
    d = 2 * F
    i = torch.arange(F, device=inv_F.device, dtype=torch.float32)
    return inv_F * factor ** (-2 * i / (d - 2))


@SCALINGS.register("ntk")
class NTKAware(RopeScaling):
    def transform(self, inv_F, pos_T):
        return ntk_inv_freq(inv_F, self.factor), 1.0


@SCALINGS.register("dynamic")
class DynamicNTK(RopeScaling):
    """NTK with s grown to the current length L: s_L = s*L/L_train - (s - 1), only when L > L_train
    (emozilla, 2023; the form used by HF transformers). Keys cached at a shorter length keep their
    old rotation: the known inconsistency of dynamic NTK under a KV cache."""

    def transform(self, inv_F, pos_T):
        length = int(pos_T.max().item()) + 1 if pos_T.numel() else 0
        if length <= self.original:
            return inv_F, 1.0
        s = self.factor * length / self.original - (self.factor - 1)
        return ntk_inv_freq(inv_F, s), 1.0


def yarn_mscale(factor: float) -> float:
    """YaRN's attention temperature sqrt(1/t) = 0.1 ln(s) + 1 (Peng et al. 2023, eq. 22), on q and k."""
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


@SCALINGS.register("yarn")
class YaRN(RopeScaling):
    """YaRN as transformers (`_compute_yarn_parameters`), vLLM and Megatron compute it, so "yarn" here means
    what it means there. With r(n) the frequency index at which a frequency turns n times over the
    original length (`find_correction_dim`), low = floor(r(beta_fast)), high = ceil(r(beta_slow)) (clamped to
    [0, head_dim - 1]), and the blend is linear in the *index*: ramp_i = clamp((i - low) / (high - low), 0, 1),
    inv_i = inv_i / s * ramp_i + inv_i * (1 - ramp_i); temperature 0.1 ln(s) + 1 on cos/sin. The paper's
    equations (linear in the wavelength ratio) are `yarn_paper`: up to ~60% apart at some frequencies.
    r(n) assumes geometric frequencies (RoPE's, exact there); for learned ones (lrope) the index positions
    come from a log-linear fit of the frequencies."""

    @dataclass
    class Config(ScalingConfig):
        beta_fast: float = 32.0  # rotations over the original length above which a frequency is kept
        beta_slow: float = 1.0  # ... below which it is interpolated (divided by s)
        truncate: bool = True  # floor/ceil the correction range, as transformers does by default

        def check(self) -> None:
            super().check()
            if not 0 < self.beta_slow < self.beta_fast:
                raise ConfigError(f"yarn needs 0 < beta_slow < beta_fast, got {self.beta_slow}, {self.beta_fast}")

    def transform(self, inv_F, pos_T):
        F = inv_F.shape[0]
        inv = inv_F.detach().double().cpu().numpy()
        used = np.flatnonzero(inv > 0)  # p-RoPE zeroes its lowest frequencies: they carry no rotation
        # log(rotations over the original length) is linear in the index for RoPE: a fit recovers it exactly
        slope, intercept = np.polyfit(used, np.log(self.original * inv[used] / (2 * math.pi)), 1)
        index_at = lambda n: float((math.log(n) - intercept) / slope)
        low, high = index_at(self.cfg.beta_fast), index_at(self.cfg.beta_slow)
        if self.cfg.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, 2 * F - 1)
        if low == high:
            high += 0.001  # as transformers' linear_ramp_factor: no division by zero
        ramp_F = ((torch.arange(F, dtype=torch.float32, device=inv_F.device) - low) / (high - low)).clamp(0.0, 1.0)
        return inv_F / self.factor * ramp_F + inv_F * (1 - ramp_F), yarn_mscale(self.factor)


@SCALINGS.register("yarn_paper")
class YaRNPaper(RopeScaling):
    """Peng et al. 2023 (YaRN), eqs. 17-22 as written: per frequency, r = L_train / wavelength;
    gamma(r) = 0 for r < alpha, 1 for r > beta, linear between; h(theta) = (1 - gamma) theta / s +
    gamma theta; attention temperature sqrt(1/t) = 0.1 ln(s) + 1 applied to q and k."""

    @dataclass
    class Config(ScalingConfig):
        alpha: float = 1.0
        beta: float = 32.0

        def check(self) -> None:
            super().check()
            if not 0 < self.alpha < self.beta:
                raise ConfigError(f"yarn_paper needs 0 < alpha < beta, got {self.alpha}, {self.beta}")

    def transform(self, inv_F, pos_T):
        wavelength_F = 2 * math.pi / inv_F.clamp_min(1e-30)
        r_F = self.original / wavelength_F
        gamma_F = ((r_F - self.cfg.alpha) / (self.cfg.beta - self.cfg.alpha)).clamp(0.0, 1.0)
        inv = (1 - gamma_F) * inv_F / self.factor + gamma_F * inv_F
        return inv, yarn_mscale(self.factor)


@SCALINGS.register("llama3")
class Llama3(RopeScaling):
    """Llama 3.1's frequency-dependent interpolation, as transformers' `_compute_llama3_parameters`: with
    wavelength w = 2 pi / inv, w < L/high_freq_factor kept, w > L/low_freq_factor divided by s, between them
    (1 - g) inv/s + g inv with g = (L/w - low) / (high - low); no temperature. L is the original length (Meta
    used 8192, s 8, low 1, high 4)."""

    @dataclass
    class Config(ScalingConfig):
        low_freq_factor: float = 1.0
        high_freq_factor: float = 4.0

        def check(self) -> None:
            super().check()
            if not 0 < self.low_freq_factor < self.high_freq_factor:
                raise ConfigError(f"llama3 needs 0 < low_freq_factor < high_freq_factor, got "
                                  f"{self.low_freq_factor}, {self.high_freq_factor}")

    def transform(self, inv_F, pos_T):
        low_wavelen = self.original / self.cfg.low_freq_factor
        high_wavelen = self.original / self.cfg.high_freq_factor
        wavelen_F = 2 * math.pi / inv_F  # inf for p-RoPE's zero frequencies: divided by s, still zero
        scaled_F = torch.where(wavelen_F > low_wavelen, inv_F / self.factor, inv_F)
        g_F = (self.original / wavelen_F - self.cfg.low_freq_factor) \
            / (self.cfg.high_freq_factor - self.cfg.low_freq_factor)
        smoothed_F = (1 - g_F) * scaled_F / self.factor + g_F * scaled_F
        medium_F = (wavelen_F >= high_wavelen) & (wavelen_F <= low_wavelen)
        return torch.where(medium_F, smoothed_F, scaled_F), 1.0


@SCALINGS.register("longrope")
class LongRoPE(RopeScaling):
    """LongRoPE (Ding et al. 2024), as transformers' `_compute_longrope_parameters` (Phi-3): every frequency
    divided by its own searched factor, `short_factor` while the sequence is at most the original length L,
    `long_factor` beyond it (the longest position in the call decides, so keys cached at a shorter length keep
    the short rotation, as in transformers); temperature `attention_factor`, by default
    sqrt(1 + ln s / ln L) for s > 1. The factors come from LongRoPE's search on a trained model (e.g. a Phi-3
    config.json): there is no default, both lists hold R/2 values."""

    @dataclass
    class Config(ScalingConfig):
        short_factor: list[float] | None = None
        long_factor: list[float] | None = None
        attention_factor: float | None = None  # None: sqrt(1 + ln(factor) / ln(original length)), 1 at factor 1

        def check(self) -> None:
            super().check()
            for name in ("short_factor", "long_factor"):
                values = getattr(self, name)
                if values is None or not values or not all(v > 0 for v in values):
                    raise ConfigError(f"longrope needs pe.scaling.{name}: a list of head_dim/2 positive per-frequency "
                                      f"factors (LongRoPE's searched values, e.g. from a Phi-3 config.json), got "
                                      f"{values}")

    def check_frequencies(self, n_frequencies):
        for name in ("short_factor", "long_factor"):
            got = len(getattr(self.cfg, name))
            if got != n_frequencies:
                raise ConfigError(f"pe.scaling.{name} has {got} values but the PE rotates {n_frequencies} "
                                  "frequencies (rotary channels / 2); give one factor per frequency")

    def attention_factor(self) -> float:
        if self.cfg.attention_factor is not None:
            return self.cfg.attention_factor
        return math.sqrt(1 + math.log(self.factor) / math.log(self.original)) if self.factor > 1 else 1.0

    def transform(self, inv_F, pos_T):
        length = int(pos_T.max().item()) + 1 if pos_T.numel() else 0
        factors = self.cfg.long_factor if length > self.original else self.cfg.short_factor
        return inv_F / torch.tensor(factors, dtype=inv_F.dtype, device=inv_F.device), self.attention_factor()


def build_scaling(cfg: ScalingConfig, train_len: int) -> RopeScaling:
    return SCALINGS.build(cfg, train_len)
