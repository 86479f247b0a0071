"""`model.attention_temperature`: logits multiplied by a factor that grows with the query's position p (0-based, the
position the PE gives the query; n = p + 1 keys up to it), so attention stays sharp as the context grows.

    none     1: today's attention, no parameter and no operation
    log_n    log(n) / log(base_len) (Chiang & Cholak 2022 scale logits by log n; base_len, default the training
             length, makes the factor 1 there); with `at_least_one`, max(1, that): attention within base_len is
             untouched, so training at the training length is unchanged and the scaling acts only past it, at
             inference (SWAN-GPT's dynamic scaling, configs/recipe/swan_gpt.yaml)
    ssmax    s[h] * log(n), s learned per head, initialised to `init` (Nakanishi 2025, Scalable-Softmax)
    llama4   log(floor((p + 1) / floor_scale) + 1) * scale + 1 (Llama 4's attention temperature tuning, transformers'
             Llama4TextAttention: floor_scale 8192, scale 0.1)

`nope_layers_only` (llama4's default, as Llama 4 applies it): only the layers whose PE is position-free (NoPE members
of a hybrid pattern) are tempered. The factor scales the query, which scales q . k in every kernel and keeps cached
decoding exact (keys are untouched; a new token's factor reads its own position); a PE's additive bias is scaled by
the same factor through its score_mod (its fast forms are then bypassed). A PE that rewrites whole rows of logits
(a logits_mod, CoPE) is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from posbench.config_loader import Checked
from posbench.errors import ConfigError
from posbench.registry import Registry


@dataclass
class TemperatureConfig(Checked):
    name: str = "none"
    nope_layers_only: bool = False  # temper only layers whose PE is position-free (Llama 4)

    @classmethod
    def registry_lookup(cls, name, where="model.attention_temperature"):
        return TEMPERATURES.config(name, where)


TEMPERATURES = Registry("attention temperature", where="model.attention_temperature")


def require_finite(value: float, name: str) -> None:
    """A temperature parameter that is not a finite number makes every logit NaN or inf from the first step: bad
    input (exit 2), refused with the config, not a run that "diverges" (exit 3) with advice to lower the LR."""
    if not math.isfinite(value):
        raise ConfigError(f"model.attention_temperature.{name} must be a finite number, got {value}")


class Temperature(nn.Module):
    name: ClassVar[str] = ""
    Config: ClassVar[type[TemperatureConfig]] = TemperatureConfig
    active: ClassVar[bool] = True

    def __init__(self, cfg: TemperatureConfig, n_heads: int, train_len: int):
        super().__init__()
        self.cfg = cfg

    def applies(self, position_free: bool) -> bool:
        """Whether a layer whose PE is (or is not) position-free is tempered."""
        return self.active and (position_free or not self.cfg.nope_layers_only)

    def factor(self, pos_T: torch.Tensor) -> torch.Tensor:
        """The factor of each query, float32: (T,) or (B, T) like the positions, or with heads (H, T) / (B, H, T)."""
        raise NotImplementedError

    def factor_BHT1(self, pos_T: torch.Tensor) -> torch.Tensor:
        """`factor` shaped to multiply q (B, H, T, K)."""
        f = self.factor(pos_T.float())
        per_head = f.dim() - pos_T.dim() == 1
        if pos_T.dim() == 1:
            return (f if per_head else f[None])[None, ..., None]
        return (f if per_head else f[:, None])[..., None]


@TEMPERATURES.register("none")
class NoTemperature(Temperature):
    active = False


@TEMPERATURES.register("log_n")
class LogN(Temperature):
    @dataclass
    class Config(TemperatureConfig):
        base_len: int | None = None  # the length where the factor is 1; None: the model's training length
        at_least_one: bool = False  # factor max(1, log(n) / log(base_len)): no change up to base_len keys

        def check(self) -> None:
            if self.base_len is not None and self.base_len < 2:
                raise ConfigError(f"model.attention_temperature.base_len must be >= 2, got {self.base_len}")

    def __init__(self, cfg, n_heads, train_len):
        super().__init__(cfg, n_heads, train_len)
        self.log_base = math.log(cfg.base_len or train_len)

    def factor(self, pos_T):
        f = torch.log(pos_T + 1.0) / self.log_base
        return f.clamp(min=1.0) if self.cfg.at_least_one else f


@TEMPERATURES.register("ssmax")
class SSMax(Temperature):
    @dataclass
    class Config(TemperatureConfig):
        init: float = 1.0  # s[h] at initialisation

        def check(self) -> None:
            require_finite(self.init, "init")

    def __init__(self, cfg, n_heads, train_len):
        super().__init__(cfg, n_heads, train_len)
        self.s = nn.Parameter(torch.full((n_heads,), float(cfg.init)))

    def factor(self, pos_T):
        log_n = torch.log(pos_T + 1.0)
        return self.s.float()[:, None] * log_n[..., None, :]  # (H, T) or (B, H, T)


@TEMPERATURES.register("llama4")
class Llama4Temperature(Temperature):
    @dataclass
    class Config(TemperatureConfig):
        nope_layers_only: bool = True
        floor_scale: int = 8192
        scale: float = 0.1

        def check(self) -> None:
            if not self.floor_scale > 0:
                raise ConfigError(f"model.attention_temperature.floor_scale must be > 0, got {self.floor_scale}")
            require_finite(self.scale, "scale")

    def factor(self, pos_T):
        return torch.log1p(torch.floor((pos_T + 1.0) / self.cfg.floor_scale)) * self.cfg.scale + 1.0


def build_temperature(cfg: TemperatureConfig, n_heads: int, train_len: int) -> Temperature:
    return TEMPERATURES.get(cfg.name)(cfg, n_heads, train_len)


def tempered_score_mod(score_mod, factor_BHT1: torch.Tensor):
    """`score_mod` with its additive bias times the query's factor (the q . k part is scaled through q)."""
    f_BHT = factor_BHT1[..., 0]
    per_row, per_head = f_BHT.shape[0] > 1, f_BHT.shape[1] > 1

    def scaled(score, b, h, q_idx, kv_idx):
        bias = score_mod(score, b, h, q_idx, kv_idx) - score
        f = f_BHT[b.long() if per_row else 0, h if per_head else 0, q_idx]
        return score + bias * f

    return scaled
