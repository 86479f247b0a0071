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


# rows taken together when finding the columns they share a segment in: FIRE's rows R apart move a run's ends by
# up to R keys, so taller groups share fewer columns (a block of 256 queries at 1,024 tokens had 44-73% of its
# entries in disagreeing columns as one group, measured on the nano model), shorter ones cost more calls
ROW_GROUP = 32


def evaluate_sorted_rows(neg_x_RN, breaks_P, slope_HP1, intercept_HP1) -> torch.Tensor:
    """(H, R, N): f(x) where every row of x is non-increasing (given as -x, non-decreasing, which
    `torch.searchsorted` needs): along a row the segment only steps down, so each row is at most P + 1 runs,
    whose ends come from P binary searches per row instead of one per entry.

    Rows a few positions apart have nearly the same runs (FIRE: rows R apart move a run's ends by less than R
    keys), so in a group of ROW_GROUP rows most keys (columns) lie in one segment for every row: there f is one
    affine map of x per head and column, a single broadcast addcmul over the group. Only the columns where the
    group's rows disagree are looked up per entry (`evaluate`). Both use the segment s = #{breaks < x} of each
    x, so the values are `evaluate`'s."""
    R, N = neg_x_RN.shape
    out_HRN = neg_x_RN.new_empty(slope_HP1.shape[0], R, N)
    for r0 in range(0, R, ROW_GROUP):
        rows = slice(r0, r0 + ROW_GROUP)
        _sorted_rows_into(out_HRN[:, rows], neg_x_RN[rows], breaks_P, slope_HP1, intercept_HP1)
    return out_HRN


def _sorted_rows_into(out_HRN, neg_x_RN, breaks_P, slope_HP1, intercept_HP1) -> None:
    H, P1 = slope_HP1.shape
    R, N = neg_x_RN.shape
    # keys with x > breaks[n] are a prefix of the row: its length, #{-x < -breaks[n]}, for every n
    above_RP = torch.searchsorted(neg_x_RN, (-breaks_P).expand(R, P1 - 1).contiguous())
    bounds_RP2 = torch.cat((above_RP.new_full((R, 1), N), above_RP, above_RP.new_zeros((R, 1))), dim=1)
    # segment s covers keys bounds[r, s + 1] .. bounds[r, s] - 1 of row r; the keys all rows have in it:
    lo_P1, hi_P1 = bounds_RP2[:, 1:].max(0).values, bounds_RP2[:, :-1].min(0).values
    # label every column with its common segment + 1 (0: rows disagree), by +-(s + 1) at its ends and a cumsum
    seg_P1 = torch.arange(1, P1 + 1, device=neg_x_RN.device) * (hi_P1 > lo_P1)
    marks_N1 = neg_x_RN.new_zeros(N + 1, dtype=torch.long)
    marks_N1.index_add_(0, lo_P1, seg_P1).index_add_(0, hi_P1, -seg_P1)
    label_N = marks_N1[:N].cumsum(0)
    # f = (-slope)(-x) + intercept; column tables with segment "-1" (disagreeing columns) reading zeros
    per_column = lambda table_HP1: torch.cat((table_HP1.new_zeros(H, 1), table_HP1), dim=1).index_select(1, label_N)
    neg_slope_HN, intercept_HN = per_column(-slope_HP1), per_column(intercept_HP1)
    torch.addcmul(intercept_HN[:, None, :], neg_slope_HN[:, None, :], neg_x_RN[None], out=out_HRN)
    mixed_M = (label_N == 0).nonzero().flatten()
    if mixed_M.numel():
        x_RM = neg_x_RN.index_select(1, mixed_M).neg_()
        out_HRN.index_copy_(2, mixed_M, evaluate(x_RM, breaks_P, slope_HP1, intercept_HP1))
