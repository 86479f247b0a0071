"""Per-size optimizer and batch settings derived from one tuned size by a fixed rule.

    lr(N)      = lr_0 * (N_0 / N) ** 0.5            the reference framework's rule (from its tiny 6e-4
                                                    it gives 3.6e-4/2.1e-4/1.3e-4 where its presets say
                                                    3e-4/2e-4/1e-4): larger models need smaller steps
    warmup(N)  = warmup_steps_0 * (N / N_0) ** 0.5  steps, also the reference's rule; stored as tokens
    batch(N)   = batch_0 * (C / C_0) ** 0.3271      tokens per step, C = 6 N D the training compute at
                                                    the size's largest budget D; the exponent of DeepSeek
                                                    LLM's fitted optimal batch (Bi et al. 2024, sec. 3.1,
                                                    B_opt = 0.292 C^0.3271), anchored at our tuned size
                                                    instead of their constant; rounded to a power of two
                                                    so every batch divides by micro_batch x seq_len x GPUs

N is the total parameter count (tied embeddings once, model/flops.py). The anchor is a size whose
settings were tuned; configs/model/<size>.yaml hold this rule's output from the tiny anchor below
(`scripts/scale_hyperparams.py --check` verifies it; tests/training/test_hparam_scaling.py too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from posbench.config import RunConfig, load_config
from posbench.model.flops import model_stats

BATCH_COMPUTE_EXPONENT = 0.3271  # Bi et al. 2024 (DeepSeek LLM), eq. 1


@dataclass(frozen=True)
class Anchor:
    size: str = "tiny"
    lr: float = 1e-3
    batch_tokens: int = 262_144  # 256 sequences of 1024
    warmup_steps: int = 100


@dataclass(frozen=True)
class Derived:
    size: str
    params: int
    lr: float
    global_batch_tokens: int
    warmup_tokens: int


def round_sig(x: float, digits: int = 2) -> float:
    return float(f"{x:.{digits - 1}e}")


def pow2(x: float) -> int:
    return 2 ** round(math.log2(x))


def preset_config(size: str) -> RunConfig:
    return load_config(model_size=size, pe_type="rope")


def size_stats(cfg: RunConfig) -> tuple[int, float]:
    """(parameters, training compute 6 N D at the largest target budget)."""
    n = model_stats(cfg.model, cfg.pe, "cpu").params_total
    budget = max(cfg.train.target_budgets)
    d = budget * n if cfg.train.budget_unit == "tokens_per_param" else budget
    return n, 6.0 * n * d


def derive(size: str, anchor: Anchor = Anchor()) -> Derived:
    n0, c0 = size_stats(preset_config(anchor.size))
    n, c = size_stats(preset_config(size))
    lr = round_sig(anchor.lr * (n0 / n) ** 0.5)
    batch = pow2(anchor.batch_tokens * (c / c0) ** BATCH_COMPUTE_EXPONENT)
    warmup_steps = round(anchor.warmup_steps * (n / n0) ** 0.5)
    return Derived(size, n, lr, batch, warmup_steps * batch)


def mismatches(size: str, anchor: Anchor = Anchor()) -> list[str]:
    """Where configs/model/<size>.yaml disagrees with the rule (empty: it agrees)."""
    want, cfg = derive(size, anchor), preset_config(size)
    have = {"optim.lr": cfg.optim.lr, "train.global_batch_tokens": cfg.train.global_batch_tokens,
            "schedule.warmup_tokens": cfg.schedule.warmup_tokens}
    rule = {"optim.lr": want.lr, "train.global_batch_tokens": want.global_batch_tokens,
            "schedule.warmup_tokens": want.warmup_tokens}
    return [f"{size}: {k} is {have[k]}, the rule gives {rule[k]}" for k in rule if have[k] != rule[k]]
