"""A checkpoint's meta.json: what resuming, branching, evaluation and reports read besides the weights. The
step is the data cursor (training/batch_sources.py addresses samples by step), so no other cursor is stored."""

from __future__ import annotations

from posbench.training.plan import Plan
from posbench.training.provenance import provenance


def meta_json(step: int, tokens: int, plan: Plan, kind: str, ident: dict, run_id: str, parent: dict | None,
              tokenizer_fingerprint: str, best_val_loss: float | None = None) -> dict:
    s = plan.schedule
    return {"step": step, "tokens": tokens, "kind": kind,  # the step is the data cursor (training/batch_sources.py)
            "best_val_loss": best_val_loss, "provenance": provenance(),
            "identity": ident, "wandb_id": run_id, "parent": parent, "tokenizer_fingerprint": tokenizer_fingerprint,
            "schedule": {"peak_lr": s.peak_lr, "warmup_tokens": s.warmup_tokens, "budget_tokens": s.budget_tokens,
                         "decay_tokens": s.decay_tokens, "decay": s.decay, "min_lr_ratio": s.min_lr_ratio},
            "world_size": plan.world}
