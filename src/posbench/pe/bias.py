"""Shared machinery of PEs that add a bias to attention logits (ALiBi, T5, KERPLE, FIRE, ...).

A bias PE implements `bias(t, h, dist, q_pos)`: the logit bias for table `t`, head index tensor `h`,
causal distance dist = q_pos - k_pos >= 0 (float32) and query position. It is written with
elementwise tensor ops only, so the same code runs inside FlexAttention's score_mod and on the
eager kernel's broadcast (H, T, S) index grid. That is all a bias PE writes; its speed-only forms (a table by
distance, and what subclasses' providers add: ALiBi's slopes, far fields, FIRE's per-row evaluator) are its `Speed`
provider's (pe/bias_speed.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posbench.pe.bias_speed import BiasSpeed
from posbench.pe.encoding import PEConfig, PositionalEncoding


@dataclass
class BiasConfig(PEConfig):
    # One set of bias parameters shared by all layers (T5's choice) or one per layer (KERPLE's).
    per_layer: bool = False


class BiasPE(PositionalEncoding):
    kind = "bias"
    Config = BiasConfig
    Speed = BiasSpeed

    @property
    def n_tables(self) -> int:
        return self.ctx.n_layers if getattr(self.cfg, "per_layer", False) else 1

    def bias(self, t: int, h, dist, q_pos) -> torch.Tensor:
        raise NotImplementedError

    def table_index(self, layer: int) -> int:
        """The bias table layer `layer` reads: its own with pe.per_layer, else the shared one."""
        return layer if self.n_tables > 1 else 0

    def score_mod(self, layer, pos_q_T, pos_k_S, feats_BHS=None):
        t = self.table_index(layer)
        pos_q_T = pos_q_T.float()
        pos_k_S = pos_k_S.float()
        if pos_q_T.dim() == 2:  # per-row positions (B, T) / (B, S): documents of a packed window
            return self._batched_mod(t, pos_q_T, pos_k_S)

        def mod(score, b, h, q_idx, kv_idx):
            q_pos = pos_q_T[q_idx]
            # masked (future) entries get distance 0: they are discarded anyway, and this keeps
            # log/pow finite there so no NaN leaks into gradients
            dist = (q_pos - pos_k_S[kv_idx]).clamp_min(0.0)
            return score + self.bias(t, h, dist, q_pos)

        return mod

    def _batched_mod(self, t, pos_q_BT, pos_k_BS):
        def mod(score, b, h, q_idx, kv_idx):
            q_pos = pos_q_BT[b, q_idx]
            dist = (q_pos - pos_k_BS[b, kv_idx]).clamp_min(0.0)  # future keys: 0, as above
            return score + self.bias(t, h, dist, q_pos)

        return mod
