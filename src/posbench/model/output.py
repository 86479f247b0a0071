"""What every architecture's `forward` returns (design rule: one return type): one small object whatever the settings.

Shape legend: B batch, T tokens, V vocabulary.

    out = model(idx_BT)                                # out.logits (B, T, V); loss and moments None
    out = model(idx_BT, targets_BT)                    # out.loss; out.logits unless the fused loss ran
    out = model(idx_BT, targets_BT, logit_moments=True)  # and, on the fused path, out.logit_moments

- `loss`: the mean cross-entropy over targets != -100 (0-d, float32), when targets were given; else None.
- `logits`: (B, T, V) whenever they exist: always without targets, and with targets on the plain head +
  loss path. None when the decoder's fused chunked loss ran (model/loss.py: the logits never exist whole;
  its chunk size is fixed when the model is built, `loss_chunk_tokens`).
- `logit_moments`: only from the fused loss, only when the call asked for them (`logit_moments=True`, the
  training loop's log steps): a detached float32 (6,) tensor [max |z|, sum z, sum z^2, count, sum of the
  rows' entropies, rows] of the logits z (`training.metrics` reads it where it has no logits). None otherwise.
- `aux_loss`: the PE's own objective (pe.aux_loss: SeqPE's contrastive and distillation losses, already weighted
  by its config), in training mode with targets only; the training step minimises `loss + aux_loss`. None otherwise.

It is a pytree node (torch.utils._pytree), so wrappers that look for the tensors in a module's output
(DDP, FSDP2's pre-backward hooks, torch.compile) see the ones inside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils import _pytree


@dataclass(frozen=True)
class ModelOutput:
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    logit_moments: torch.Tensor | None = None
    aux_loss: torch.Tensor | None = None


_pytree.register_dataclass(ModelOutput)
