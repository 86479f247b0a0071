"""The speed layer of the bias PEs (pe/bias.py `BiasPE`: ALiBi, T5, KERPLE, FIRE, ...): a table by distance, which a
kernel gathers (sdpa_bias) instead of evaluating `score_mod` on every (query, key) pair, and the hooks a subclass's
provider uses to add its own fast forms (ALiBi's slopes, far fields, FIRE's per-row evaluator: pe/fast_bias.py).
Every form is the bias `BiasPE.bias` defines, evaluated on another grid, so a kernel ignoring it computes the same
attention."""

from __future__ import annotations

import functools

import torch

from posbench.pe.fast_bias import DistanceTable, FastBias
from posbench.pe.speed import PESpeed


class BiasSpeed(PESpeed):
    def fast_bias(self, layer, pos_q_T, pos_k_S) -> FastBias:
        """The bias by distance of the queries `invariant_rows` serves, for a kernel that gathers it (sdpa_bias);
        none with per-row positions. Subclasses add their own fast forms to it (`dataclasses.replace`)."""
        if pos_q_T.dim() == 2:
            return FastBias()
        t = self.pe.table_index(layer)
        return FastBias(table=functools.partial(self.by_distance, t, pos_q_T.float(), pos_k_S.float()))

    def invariant_rows(self, t: int, pos_q_T) -> int:
        """How many leading queries (of T, at ascending positions) have a bias that is a function of head and
        distance alone: all of them for a translation-invariant PE (`is_relative`, held to it by the contract
        test), none by default otherwise. FIRE's provider overrides it (its queries before the threshold L)."""
        return pos_q_T.shape[0] if self.pe.is_relative else 0

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
        checked that the call has such a table): `bias` on that grid, or a provider's faster no-grad form of it."""
        S = dist_S.shape[0]
        h = torch.arange(H, device=dist_S.device)[:, None]
        return self.pe.bias(t, h, dist_S[None, :], q_pos.expand(1, S)).expand(H, S).float()

    @staticmethod
    def consecutive(pos_q_T, pos_k_S) -> bool:
        """Keys at consecutive positions, the queries the last T of them (query t at key position S - T + t)."""
        T, S = pos_q_T.shape[0], pos_k_S.shape[0]
        dist_S = torch.arange(S, device=pos_k_S.device, dtype=torch.float32)
        return T <= S and torch.equal(pos_k_S, pos_k_S[0] + dist_S) and torch.equal(pos_q_T, pos_k_S[S - T:])
