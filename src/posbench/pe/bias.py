"""Shared machinery of PEs that add a bias to attention logits (ALiBi, T5, KERPLE, FIRE, ...).

A bias PE implements `bias(t, h, dist, q_pos)`: the logit bias for table `t`, head index tensor `h`,
causal distance dist = q_pos - k_pos >= 0 (float32) and query position. It is written with
elementwise tensor ops only, so the same code runs inside FlexAttention's score_mod and on the
eager kernel's broadcast (H, T, S) index grid.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from posbench.pe.encoding import PEConfig, PositionalEncoding


@dataclass
class BiasConfig(PEConfig):
    # One set of bias parameters shared by all layers (T5's choice) or one per layer (KERPLE's).
    per_layer: bool = False


class BiasPE(PositionalEncoding):
    kind = "bias"
    Config = BiasConfig

    @property
    def n_tables(self) -> int:
        return self.ctx.n_layers if getattr(self.cfg, "per_layer", False) else 1

    def bias(self, t: int, h, dist, q_pos) -> torch.Tensor:
        raise NotImplementedError

    def score_mod(self, layer, pos_q_T, pos_k_S):
        t = layer if self.n_tables > 1 else 0
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

        # the same bias by distance, for a kernel that can gather it (sdpa_bias); FlexAttention ignores it
        mod.by_distance = functools.partial(self.by_distance, t, pos_q_T, pos_k_S)
        return mod

    def by_distance(self, t: int, pos_q_T, pos_k_S, H: int) -> torch.Tensor | None:
        """(H, S) float32: the bias at distances 0 .. S-1, when in this call it is a function of head and
        q_idx - kv_idx alone: a translation-invariant PE (`is_relative`, held to it by the contract test) and
        consecutive positions with the queries last (query t at key position S - T + t). Else None."""
        T, S = pos_q_T.shape[0], pos_k_S.shape[0]
        if not self.is_relative or T > S:
            return None
        dist_S = torch.arange(S, device=pos_k_S.device, dtype=torch.float32)
        if not (torch.equal(pos_k_S, pos_k_S[0] + dist_S) and torch.equal(pos_q_T, pos_k_S[S - T:])):
            return None
        h = torch.arange(H, device=pos_k_S.device)[:, None]
        # q_pos: any position gives the same bias for a translation-invariant PE; the last query's is real
        return self.bias(t, h, dist_S[None, :], pos_q_T[-1].expand(1, S)).expand(H, S).float()

    def _batched_mod(self, t, pos_q_BT, pos_k_BS):
        def mod(score, b, h, q_idx, kv_idx):
            q_pos = pos_q_BT[b, q_idx]
            dist = (q_pos - pos_k_BS[b, kv_idx]).clamp_min(0.0)  # future keys: 0, as above
            return score + self.bias(t, h, dist, q_pos)

        return mod
