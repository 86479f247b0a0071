"""Teacher-forced accuracy and loss of a model trained directly on a task's token form.

Accuracy is per target position (argmax == target where target != -100), the measure the
synthetic-task literature reports for labelling tasks; `exact` is the share of examples with every
target right. A length a PE cannot represent gives None ("n/a"), never a clamped number.

With `train_len`, accuracy is also split by where the target sits: `within` counts target positions
t < train_len (positions the model was trained at), `beyond` those at t >= train_len, the only ones that
measure extrapolation; an OOD example mixes both, so its all-positions accuracy flatters a PE that is
right in range and at chance past it. `per_position` holds (correct, total) per position for curves.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from posbench.evaluation.generate import DataPositions, greedy_cached, greedy_recompute, supports_cache
from posbench.pe import PositionRangeError
from posbench.targets import IGNORE


def model_device(model) -> torch.device:
    """Where the model's weights are (CPU for a stand-in without any): rows built on the CPU go there to be scored,
    so a study or sweep trained on CUDA is scored where it trained."""
    first = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return torch.device("cpu") if first is None else first.device


@dataclass
class TaskScore:
    acc: float | None
    exact: float | None
    loss: float | None
    per_example: list[float]  # per-example target accuracy (empty when n/a)
    within: float | None = None  # accuracy over target positions < train_len (None: no such target)
    beyond: float | None = None  # accuracy over target positions >= train_len (None: no such target)
    per_position: list[tuple[int, int]] | None = None  # (correct, total) at each position


def _share(correct: torch.Tensor, total: torch.Tensor) -> float | None:
    n = int(total.sum())
    return None if n == 0 else int(correct.sum()) / n


@torch.no_grad()
def score_rows(model, inputs_BT: torch.Tensor, targets_BT: torch.Tensor, batch_size: int = 256,
               train_len: int | None = None, positions_BT: torch.Tensor | None = None) -> TaskScore:
    """`positions_BT`: the task's own position ids of the rows (`source.pad_positions`), fed as in training."""
    model.eval()
    device = model_device(model)
    correct, total, loss_sum, per_example = 0, 0, 0.0, []
    hits_T = torch.zeros(inputs_BT.shape[1], dtype=torch.long)  # correct targets per position
    counts_T = torch.zeros(inputs_BT.shape[1], dtype=torch.long)  # targets per position
    try:
        for start in range(0, inputs_BT.shape[0], batch_size):
            x, y = (t[start : start + batch_size].to(device) for t in (inputs_BT, targets_BT))
            # the keyword only with ids: a model with the plain forward (a stand-in, a wrapper) scores unchanged
            ids = {} if positions_BT is None else {"data_pos_BT": positions_BT[start : start + batch_size].to(device)}
            logits = model(x, **ids).logits.float()
            mask = y != IGNORE
            hit = (logits.argmax(-1) == y) & mask
            correct += int(hit.sum())
            total += int(mask.sum())
            hits_T += hit.sum(0).cpu()
            counts_T += mask.sum(0).cpu()
            loss_sum += float(F.cross_entropy(logits[mask], y[mask], reduction="sum"))
            per_example += (hit.sum(1).float() / mask.sum(1).clamp_min(1)).tolist()
    except PositionRangeError:
        return TaskScore(None, None, None, [])
    exact = sum(1 for a in per_example if a == 1.0) / max(1, len(per_example))
    split = train_len if train_len is not None else inputs_BT.shape[1]
    return TaskScore(correct / max(1, total), exact, loss_sum / max(1, total), per_example,
                     within=_share(hits_T[:split], counts_T[:split]), beyond=_share(hits_T[split:], counts_T[split:]),
                     per_position=list(zip(hits_T.tolist(), counts_T.tolist())))


@torch.no_grad()
def generated_exact(model, task, examples, batch_size: int = 64) -> list[float] | None:
    """Per answer-style example, 1.0 when greedy decoding after its prompt writes its whole answer (`<end>`
    included), else 0.0: through the KV cache (re-running the sequence for PEs whose positions are drawn per
    sequence), with the task's own position ids fed as in training, the prompt's and then each generated token's
    by `task.answer_positions`. None ("n/a") when the PE cannot represent the lengths. Rows of one batch share
    their prompt and answer lengths (no padding)."""
    model.eval()
    device = model_device(model)
    decode = greedy_cached if supports_cache(model) else greedy_recompute
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, ex in enumerate(examples):
        n_prompt = int(np.argmax(ex.targets_T != IGNORE)) + 1  # the first target predicts the first answer token
        groups[(n_prompt, len(ex.tokens_T) - n_prompt)].append(i)
    out = [0.0] * len(examples)
    try:
        for (n_prompt, n_answer), rows in sorted(groups.items()):
            for start in range(0, len(rows), batch_size):
                chunk = rows[start:start + batch_size]
                prompt_BT = torch.from_numpy(np.stack([examples[i].tokens_T[:n_prompt] for i in chunk])).to(device)
                positions = None
                if examples[chunk[0]].positions_T is not None:
                    pos_BT = torch.from_numpy(np.stack([examples[i].positions_T[:n_prompt] for i in chunk])).to(device)
                    positions = DataPositions(pos_BT, task.answer_positions)
                new_BN = decode(model, prompt_BT, n_answer, positions=positions)
                for i, new in zip(chunk, new_BN.tolist(), strict=True):
                    out[i] = float(new == examples[i].tokens_T[n_prompt:].tolist())
    except PositionRangeError:
        return None
    return out


@torch.no_grad()
def attention_probs(model, inputs_1T: torch.Tensor, positions_1T: torch.Tensor | None = None
                    ) -> list[list[list[list[float]]]]:
    """[layer][head][query][key] attention probabilities for one example (eager reference); `positions_1T`: the
    task's own position ids, as score_rows takes them."""
    device = model_device(model)
    ids = {} if positions_1T is None else {"data_pos_BT": positions_1T.to(device)}
    return [p[0].tolist() for p in model.attention_probs(inputs_1T.to(device), **ids)]
