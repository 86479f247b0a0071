"""A ReLU MLP of one scalar, 1 -> hidden -> H (FIRE's f_theta, Li et al. 2024 eq. 6), as the piecewise-linear
function it is, for evaluation without autograd: f_h(x) = b2[h] + sum_n w2[h, n] relu(w1[n] x + b1[n]) is linear
between the units' switch points x_n = -b1[n] / w1[n], so on segment s (breaks[s-1] < x <= breaks[s]) it is
slope[h, s] x + intercept[h, s]: one segment lookup per x (shared by the heads) and two gathers per head, instead
of `hidden` elementwise passes per head.

Shape legend: H heads, P breaks (units with w1 != 0), R rows (queries) and N keys of a block.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def relu_mlp_segments(w1_N, b1_N, w2_HN, b2_H) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(breaks_P ascending, slope_HP1, intercept_HP1) in float32, computed in float64. A unit with w1 > 0 is on
    right of its break, w1 < 0 left of it; w1 = 0 units are constants (relu(b1)), part of every intercept.
    Units are counted on by the rank of their break in the sorted order, not by comparing values: with equal
    breaks the segments between them have zero width, and `torch.bucketize` (right=False: s = #{breaks < x})
    never picks one, so the rank order among equal breaks cannot matter."""
    w1, b1, w2_HN, b2_H = w1_N.double(), b1_N.double(), w2_HN.double(), b2_H.double()
    on = w1 != 0
    breaks, order = (-b1[on] / w1[on]).sort()
    P = breaks.numel()
    rank = torch.empty_like(order)
    rank[order] = torch.arange(P, device=order.device)
    seg = torch.arange(P + 1, device=order.device)[None, :]
    right = (w1[on] > 0)[:, None] & (rank[:, None] < seg)  # (P, P+1): unit n is on in segment s
    left = (w1[on] < 0)[:, None] & (rank[:, None] >= seg)
    active = (right | left).double()
    slope_HP1 = w2_HN[:, on] @ (active * w1[on][:, None])
    constant_H = b2_H + w2_HN[:, ~on] @ torch.relu(b1[~on])
    intercept_HP1 = constant_H[:, None] + w2_HN[:, on] @ (active * b1[on][:, None])
    return breaks.float(), slope_HP1.float(), intercept_HP1.float()


def evaluate(x_RN, breaks_P, slope_HP1, intercept_HP1) -> torch.Tensor:
    """(H, R, N): f(x) for any x, the segment of each x by binary search (`torch.bucketize`)."""
    H, R, N = slope_HP1.shape[0], *x_RN.shape
    seg_HRN = torch.bucketize(x_RN, breaks_P)[None].expand(H, R, N)
    pick = lambda table_HP1: torch.gather(table_HP1[:, None, :].expand(H, R, -1), 2, seg_HRN)
    return pick(intercept_HP1).addcmul_(pick(slope_HP1), x_RN)


def evaluate_sorted_rows(neg_x_RN, breaks_P, slope_HP1, intercept_HP1) -> torch.Tensor:
    """(H, R, N): f(x) where every row of x is non-increasing (given as -x, non-decreasing, which
    `torch.searchsorted` needs): along a row the segment only steps down, so each row is at most P + 1 runs.
    Their lengths come from P binary searches per row instead of one per entry; the same segments as
    `evaluate` (x enters segment s exactly when #{breaks < x} = s), so the same values.

    The leading keys that every row has in one segment (FIRE: the far keys, x = psi(d) / psi(i) near 1,
    usually most of a row) are one affine map of x with that segment's slope and intercept; only the rest is
    gathered per entry and head."""
    H, P1 = slope_HP1.shape
    R, N = neg_x_RN.shape
    # keys with x > breaks[n] are a prefix of the row: its length, #{-x < -breaks[n]}, for every n
    above_RP = torch.searchsorted(neg_x_RN, (-breaks_P).expand(R, P1 - 1).contiguous())
    bounds_RP2 = torch.cat((above_RP.new_full((R, 1), N), above_RP, above_RP.new_zeros((R, 1))), dim=1)
    runs_RP1 = (bounds_RP2[:, :-1] - bounds_RP2[:, 1:]).flip(1)  # row r: segments P, P-1, .., 0 in key order
    neg_slope_HP1, intercept_HP1 = -slope_HP1.flip(1), intercept_HP1.flip(1)  # f = (-slope)(-x) + intercept
    out_HRN = neg_x_RN.new_empty(H, R, N)
    # the common lead: every row's first nonempty run is run j, for at least `lead` keys
    first_R = (runs_RP1 > 0).int().argmax(1)
    j = int(first_R[0])
    lead = int(runs_RP1[:, j].min()) if bool((first_R == j).all()) else 0
    if lead > 0:
        # per head with the slope as a Python number: torch's vectorised scalar path (a broadcast (H, 1, 1)
        # addcmul was 4x slower, measured)
        for h, slope in enumerate(neg_slope_HP1[:, j].tolist()):
            torch.add(intercept_HP1[h, j], neg_x_RN[:, :lead], alpha=slope, out=out_HRN[h, :, :lead])
        runs_RP1 = runs_RP1.clone()
        runs_RP1[:, j] -= lead
    M = N - lead
    if M == 0:
        return out_HRN
    take = torch.repeat_interleave(runs_RP1.flatten(), output_size=R * M)  # the (row, run) of every entry left
    neg_slope_HP1, intercept_HP1 = neg_slope_HP1.repeat(1, R), intercept_HP1.repeat(1, R)
    # per head: two 1-D gathers (torch's fast index_select path) and one addcmul into the output
    slope_RM, intercept_RM = neg_x_RN.new_empty(R, M), neg_x_RN.new_empty(R, M)
    for h in range(H):
        torch.index_select(intercept_HP1[h], 0, take, out=intercept_RM.view(-1))
        torch.index_select(neg_slope_HP1[h], 0, take, out=slope_RM.view(-1))
        torch.addcmul(intercept_RM, slope_RM, neg_x_RN[:, lead:], out=out_HRN[h, :, lead:])
    return out_HRN
