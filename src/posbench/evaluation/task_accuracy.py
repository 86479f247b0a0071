"""Teacher-forced accuracy and loss of a model trained directly on a task's token form.

Accuracy is per target position (argmax == target where target != -100), the measure the
synthetic-task literature reports for labelling tasks; `exact` is the share of examples with every
target right. A length a PE cannot represent gives None ("n/a"), never a clamped number.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posbench.pe import PositionRangeError

IGNORE = -100


@dataclass
class TaskScore:
    acc: float | None
    exact: float | None
    loss: float | None
    per_example: list[float]  # per-example target accuracy (empty when n/a)


@torch.no_grad()
def score_rows(model, inputs_BT: torch.Tensor, targets_BT: torch.Tensor, batch_size: int = 256) -> TaskScore:
    model.eval()
    correct, total, loss_sum, per_example = 0, 0, 0.0, []
    try:
        for start in range(0, inputs_BT.shape[0], batch_size):
            x, y = inputs_BT[start : start + batch_size], targets_BT[start : start + batch_size]
            logits = model(x).float()
            mask = y != IGNORE
            hit = (logits.argmax(-1) == y) & mask
            correct += int(hit.sum())
            total += int(mask.sum())
            loss_sum += float(F.cross_entropy(logits[mask], y[mask], reduction="sum"))
            per_example += (hit.sum(1).float() / mask.sum(1).clamp_min(1)).tolist()
    except PositionRangeError:
        return TaskScore(None, None, None, [])
    exact = sum(1 for a in per_example if a == 1.0) / max(1, len(per_example))
    return TaskScore(correct / max(1, total), exact, loss_sum / max(1, total), per_example)


@torch.no_grad()
def attention_probs(model, inputs_1T: torch.Tensor) -> list[list[list[list[float]]]]:
    """[layer][head][query][key] attention probabilities for one example (eager reference)."""
    scores = model.attention_scores(inputs_1T)
    return [torch.softmax(s[0], dim=-1).nan_to_num(0.0).tolist() for s in scores]
