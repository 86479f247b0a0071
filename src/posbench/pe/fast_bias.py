"""The speed-only side of the PE contract: what a PE's provider may hand the attention kernels beyond its score_mod,
as one typed object (`PESpeed.fast_bias`, pe/speed.py). Every field is an exact no-grad form of the bias the PE's
score_mod already defines, so a kernel that ignores the object computes the same attention, only slower; the
kernels read these fields and nothing else of a PE's bias (model/attention_plan.py says which field serves which
path).

Shape legend: H heads, S keys, R rows (queries) of one block, N keys of one block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

# bias_block(q0, q1, k0, k1) -> (H, R, N) float32: the bias of queries q0..q1-1 against keys k0..k1-1
BiasBlock = Callable[[int, int, int, int], torch.Tensor]
# the kernel's reading of a table by distance (model/bias_attention.distance_blocks at the call's T, S and block
# rows): table_CS -> the BiasBlock of its (C, R, N) rows, rows last to first
Gather = Callable[[torch.Tensor], BiasBlock]


@dataclass(frozen=True)
class FarField:
    """bias(h, d) = intercept_H[h] + slope_H[h] * d for every distance d >= start, whatever the query position
    (float32, on the PE's device): what lets model/far_field.py attend to those keys without a mask."""

    start: int
    slope_H: torch.Tensor
    intercept_H: torch.Tensor


@dataclass(frozen=True)
class DistanceTable:
    """The bias of the call's first `rows` queries as a function of head and distance alone: `bias_HS[h, d]` at
    distances d = 0 .. S-1 (float32), valid at consecutive positions with the queries last (query t at key position
    S - T + t)."""

    rows: int
    bias_HS: torch.Tensor


@dataclass(frozen=True)
class FastBias:
    """One call's fast forms of a layer's bias (pe.speed.fast_bias(layer, pos_q, pos_k)); None fields: no such form.

    table(H)         -> DistanceTable | None  the bias by distance of the leading queries it serves (a relative
                        bias at consecutive positions; FIRE's queries before its threshold); None where the call
                        has none (spread-out positions)
    rows_bias(H, gather) -> BiasBlock       the other queries' rows, **last to first**, by the PE's own exact
                        no-grad evaluator (FIRE's piecewise-linear MLP); `gather` reads tables of its own by distance
    far_field(H)     -> FarField            where the bias is affine in the distance (ALiBi, T5, relative_learned)
    alibi_slopes     (H,) float32           the bias is exactly ALiBi's -m_h (p_i - p_j) (flash-attn's fused ALiBi,
                        which sees no positions and applies token distances i - j: only where the PE's context says
                        they are the same, PEContext.token_distances, model/kernels.py FlashAlibiKernel.supports); it
                        must not depend on the call (kernels read it at construction)
    """

    table: Callable[[int], DistanceTable | None] | None = None
    rows_bias: Callable[[int, Gather], BiasBlock] | None = None
    far_field: Callable[[int], FarField] | None = None
    alibi_slopes: torch.Tensor | None = None
