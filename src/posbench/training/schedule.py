"""Warmup-stable-decay learning rate as a pure function of tokens seen.

    lr(t) = peak * t / W                                   t < W          (warmup)
          = peak                                           W <= t < B - D (stable)
          = peak * (m + (1 - m) * shape((t - (B - D)) / D)) B - D <= t    (decay, clamped at t = B)

with B the budget in tokens, D = decay_frac * B, m = min_lr_ratio. Budgets share warmup and the
stable phase, so one run serves several budgets: a checkpoint saved at B_i - D_i (the *branch point*)
lets a decay-only run finish budget B_i (Hagele et al. 2024, "Scaling Laws and Compute-Optimal
Training Beyond Fixed Training Durations", section 3).

A PE's switch point (DroPE's drop `pe.drop_at`, RePo's `pe.rope_until` = f) is a pure function of the budget too:
the PE switches once
tokens seen reach f * B of the budget B the run follows (a branch run: its own budget), so resuming and
branching need no state: a run resumed or branched past the point drops the PE before its first step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from posbench.errors import ConfigError
from posbench.training.train_config import ScheduleConfig

# decay shapes: progress x in [0, 1] -> multiplier in [0, 1]
DECAY_SHAPES: dict[str, Callable[[float], float]] = {
    "linear": lambda x: 1.0 - x,
    "1-sqrt": lambda x: 1.0 - math.sqrt(x),  # Hagele et al. 2024, eq. 2: best of their shapes
    "cosine": lambda x: 0.5 * (1.0 + math.cos(math.pi * x)),
}


@dataclass(frozen=True)
class WSD:
    peak_lr: float
    warmup_tokens: int
    budget_tokens: int
    decay_tokens: int
    decay: str
    min_lr_ratio: float

    @property
    def decay_start(self) -> int:
        """The branch point of this budget: the first token count whose LR is below the peak."""
        return self.budget_tokens - self.decay_tokens

    def lr(self, tokens_seen: int) -> float:
        if tokens_seen < self.warmup_tokens:
            return self.peak_lr * tokens_seen / self.warmup_tokens
        if tokens_seen < self.decay_start:
            return self.peak_lr
        progress = min(1.0, (tokens_seen - self.decay_start) / max(1, self.decay_tokens))
        m = self.min_lr_ratio
        return self.peak_lr * (m + (1 - m) * DECAY_SHAPES[self.decay](progress))


def drop_pe_tokens(pe_share: float | None, budget_tokens: int) -> int | None:
    """Tokens seen after which the PE switches (DroPE's drop, RePo's networks taking over): the PE's own share of
    the budget (`pe_share`, PEConfig.drop_share(): DroPE's pe.drop_at, RePo's pe.rope_until); None for a PE that
    never switches."""
    return None if pe_share is None else int(pe_share * budget_tokens)


def make_schedule(cfg: ScheduleConfig, peak_lr: float, budget_tokens: int, smallest_budget: int) -> WSD:
    """Warmup is shared by every budget (it is taken from the smallest), so branches match."""
    warmup = cfg.warmup_tokens or int(cfg.warmup_frac * smallest_budget)
    decay = int(cfg.decay_frac * budget_tokens)
    if warmup + decay > budget_tokens:
        raise ConfigError(f"schedule does not add up: warmup ({warmup:,} tokens) + decay ({decay:,}) exceed the "
                          f"budget ({budget_tokens:,}); lower schedule.warmup_tokens or schedule.decay_frac")
    return WSD(peak_lr, warmup, budget_tokens, decay, cfg.decay, cfg.min_lr_ratio)
