"""Shared machinery of PEs that add a bias to attention logits (ALiBi, T5, KERPLE, FIRE, ...).

A bias PE implements `bias(t, h, dist, q_pos)`: the logit bias for table `t`, head index tensor `h`,
causal distance dist = q_pos - k_pos >= 0 (float32) and query position. It is written with
elementwise tensor ops only, so the same code runs inside FlexAttention's score_mod and on the
eager kernel's broadcast (H, T, S) index grid. Its speed-only forms (a table by distance, and what subclasses add:
ALiBi's slopes, far fields, FIRE's per-row evaluator) reach kernels through `fast_bias` (pe/fast_bias.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from posbench.pe.encoding import PEConfig, PositionalEncoding
from posbench.pe.fast_bias import DistanceTable, FastBias


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

    def fast_bias(self, layer, pos_q_T, pos_k_S) -> FastBias:
        """The bias by distance of the queries `invariant_rows` serves, for a kernel that gathers it (sdpa_bias);
        none with per-row positions. Subclasses add their own fast forms to it (`dataclasses.replace`)."""
        if pos_q_T.dim() == 2:
            return FastBias()
        t = self.table_index(layer)
        return FastBias(table=functools.partial(self.by_distance, t, pos_q_T.float(), pos_k_S.float()))

    def invariant_rows(self, t: int, pos_q_T) -> int:
        """How many leading queries (of T, at ascending positions) have a bias that is a function of head and
        distance alone: all of them for a translation-invariant PE (`is_relative`, held to it by the contract
        test), none by default otherwise. FIRE overrides it (its queries before the threshold L)."""
        return pos_q_T.shape[0] if self.is_relative else 0

    def by_distance(self, t: int, pos_q_T, pos_k_S, H: int) -> DistanceTable | None:
        """The bias at distances 0 .. S-1 of the first `invariant_rows` queries, when in this call their bias is a
        function of head and q_idx - kv_idx alone: consecutive positions with the queries last (query t at key
        position S - T + t) and at least one such query. Else None."""
        rows = self.invariant_rows(t, pos_q_T)
        if rows == 0 or not self.consecutive(pos_q_T, pos_k_S):
            return None
        dist_S = torch.arange(pos_k_S.shape[0], device=pos_k_S.device, dtype=torch.float32)
        # q_pos: any of those queries' positions gives the same bias; the last one's is real
        return DistanceTable(rows, self.distance_table(t, H, dist_S, pos_q_T[rows - 1]))

    def distance_table(self, t: int, H: int, dist_S, q_pos) -> torch.Tensor:
        """(H, S) float32: the bias at distances dist_S of a query at q_pos (what `by_distance` returns once it has
        checked that the call has such a table): `bias` on that grid, or a PE's faster no-grad form of it."""
        S = dist_S.shape[0]
        h = torch.arange(H, device=dist_S.device)[:, None]
        return self.bias(t, h, dist_S[None, :], q_pos.expand(1, S)).expand(H, S).float()

    @staticmethod
    def consecutive(pos_q_T, pos_k_S) -> bool:
        """Keys at consecutive positions, the queries the last T of them (query t at key position S - T + t)."""
        T, S = pos_q_T.shape[0], pos_k_S.shape[0]
        dist_S = torch.arange(S, device=pos_k_S.device, dtype=torch.float32)
        return T <= S and torch.equal(pos_k_S, pos_k_S[0] + dist_S) and torch.equal(pos_q_T, pos_k_S[S - T:])

    def _batched_mod(self, t, pos_q_BT, pos_k_BS):
        def mod(score, b, h, q_idx, kv_idx):
            q_pos = pos_q_BT[b, q_idx]
            dist = (q_pos - pos_k_BS[b, kv_idx]).clamp_min(0.0)  # future keys: 0, as above
            return score + self.bias(t, h, dist, q_pos)

        return mod
