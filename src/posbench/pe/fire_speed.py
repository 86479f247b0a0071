"""FIRE's speed layer (pe/fire.py is its meaning): exact no-grad forms of `FIRE.bias` for the kernels. The MLP
f_theta is piecewise linear in x = psi(i - j) / psi(max(L, i)) (pe/piecewise_linear.py), so one lookup per x
replaces `hidden` passes per head; queries at or before the threshold L share one normaliser, so their bias is a
table by distance (BiasSpeed); the later ones are evaluated per row (`rows_bias`)."""

from __future__ import annotations

import dataclasses
import functools

import torch

from posbench.pe.bias_speed import BiasSpeed
from posbench.pe.piecewise_linear import evaluate, evaluate_sorted_rows, relu_mlp_segments


class FIRESpeed(BiasSpeed):
    def __init__(self, pe):
        super().__init__(pe)
        self._segments = {}  # table -> (its MLP weights, their piecewise-linear form): see `piecewise`

    def _normaliser(self, t, q_pos):
        """c and psi(max(L, i)) by `FIRE.bias`'s own ops (so the fast path's x is `bias`'s to the bit)."""
        pe = self.pe
        c = pe.c_L[t].clamp_min(1e-4)
        return c, torch.log1p(c * torch.maximum(q_pos, pe.threshold_L[t]).clamp_min(1.0))

    def fast_bias(self, layer, pos_q_T, pos_k_S):
        # the queries past the threshold, which the distance table does not serve, by the MLP's piecewise form
        fast = super().fast_bias(layer, pos_q_T, pos_k_S)
        if pos_q_T.dim() == 2:
            return fast
        return dataclasses.replace(fast, rows_bias=functools.partial(self.rows_bias, self.pe.table_index(layer),
                                                                     pos_q_T.float(), pos_k_S.float()))

    def invariant_rows(self, t, pos_q_T):
        # queries at i <= max(L, 1) share the normaliser psi(max(L, 1)): their bias is one of distance alone
        return int((pos_q_T <= self.pe.threshold_L[t].clamp_min(1.0)).sum())

    def distance_table(self, t, H, dist_S, q_pos):
        """BiasSpeed.distance_table through the piecewise-linear MLP without autograd (one lookup per distance, not
        `hidden` passes per head: decoding asks per layer and step); under autograd, `bias` as every PE."""
        if torch.is_grad_enabled():
            return super().distance_table(t, H, dist_S, q_pos)
        c, norm = self._normaliser(t, q_pos.float())
        return evaluate((torch.log1p(c * dist_S) / norm)[None], *self.piecewise(t))[:, 0].expand(H, -1)

    def piecewise(self, t):
        """(breaks_P, slope_HP1, intercept_HP1) of table t's MLP (pe/piecewise_linear.py), remade only when its
        weights changed: decoding asks per layer and step. Compared by value, not by version counter, which an
        edit through `.data` would not move."""
        pe = self.pe
        weights = (pe.w1_LN[t], pe.b1_LN[t], pe.w2_LHN[t], pe.b2_LH[t])
        kept = self._segments.get(t)
        if kept is None or not all(a.device == b.device and torch.equal(a, b) for a, b in zip(kept[0], weights)):
            kept = tuple(w.detach().clone() for w in weights), relu_mlp_segments(*weights)
            self._segments[t] = kept
        return kept[1]

    def rows_bias(self, t, pos_q_T, pos_k_S, H, gather=None):
        """`FastBias.rows_bias` (pe/fast_bias.py), rows last to first, without autograd: x = psi(d) / psi(max(L, i))
        as in `bias`, shared by the heads, then the MLP's segment of x and its slope and intercept. At consecutive
        positions psi(d) comes from a table by distance (the kernel's `gather`) and each row of x falls as keys near
        the query, so a row's segments are runs found by P binary searches; otherwise each x is looked up."""
        segments = self.piecewise(t)
        c, norm_T = self._normaliser(t, pos_q_T.float())
        pos_q_T, pos_k_S = pos_q_T.float(), pos_k_S.float()
        if gather is None or not self.consecutive(pos_q_T, pos_k_S):
            def block(q0, q1, k0, k1):
                dist_RN = (pos_q_T[q0:q1].flip(0)[:, None] - pos_k_S[None, k0:k1]).clamp_min(0.0)
                return evaluate(torch.log1p(c * dist_RN) / norm_T[q0:q1].flip(0)[:, None], *segments)

            return block
        # psi by distance, made non-decreasing (log1p's last-bit wobble must not break the rows' order); future
        # keys read distance-0 zeros, the row's smallest x, so rows stay sorted to their end
        dist_S = torch.arange(pos_k_S.shape[0], device=pos_k_S.device, dtype=torch.float32)
        psi_1S = torch.log1p(c * dist_S).cummax(0).values[None]
        psi_blocks, neg_norm_T = gather(psi_1S), -norm_T

        def sorted_block(q0, q1, k0, k1):
            neg_x_RN = psi_blocks(q0, q1, k0, k1)[0].div_(neg_norm_T[q0:q1].flip(0)[:, None])
            return evaluate_sorted_rows(neg_x_RN, *segments)

        return sorted_block
