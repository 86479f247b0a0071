"""Extrapolation measured on its own: accuracy within vs beyond the training length, by hand-built cases.

A "model" that is right at every position < L and wrong at every position >= L must score 100% within
and 0% beyond, whatever its all-positions average says.
"""

import torch
from torch import nn

from posbench.evaluation.suites.algorithmic import position_split
from posbench.evaluation.task_accuracy import IGNORE, score_rows
from posbench.model.output import ModelOutput

V = 7


class RightThenWrong(nn.Module):
    """Logits whose argmax is the target at positions < L and (target + 1) mod V at positions >= L."""

    def __init__(self, inputs_BT: torch.Tensor, targets_BT: torch.Tensor, L: int):
        super().__init__()
        self.inputs, self.targets, self.L = inputs_BT, targets_BT, L

    def forward(self, idx_BT):
        B, T = idx_BT.shape
        first = next(i for i in range(len(self.inputs)) if torch.equal(self.inputs[i], idx_BT[0]))  # batch offset
        y = self.targets[first:first + B].clamp_min(0)
        want = torch.where(torch.arange(T) < self.L, y, (y + 1) % V)
        return ModelOutput(logits=nn.functional.one_hot(want, V).float())


def test_right_within_wrong_beyond_scores_100_and_0():
    torch.manual_seed(0)
    x = torch.randint(0, V, (6, 10))
    y = torch.randint(0, V, (6, 10))
    y[:, :2] = IGNORE  # positions with nothing to predict are not counted anywhere
    y[0, 7] = IGNORE
    model = RightThenWrong(x, y, L=6)
    score = score_rows(model, x, y, batch_size=4, train_len=6)
    assert score.within == 1.0 and score.beyond == 0.0
    within_n, beyond_n = 6 * 4, 6 * 4 - 1  # positions 2..5 and 6..9, one target ignored
    assert score.acc == within_n / (within_n + beyond_n)  # the mixed figure sits in between: 24/47
    assert [n for _, n in score.per_position] == [0, 0, 6, 6, 6, 6, 6, 5, 6, 6]
    assert [c for c, _ in score.per_position] == [0, 0, 6, 6, 6, 6, 0, 0, 0, 0]
    # every target inside the training length: nothing beyond to score
    assert score_rows(model, x, y, train_len=10).beyond is None
    model.L = 10
    assert score_rows(model, x, y, train_len=10).within == 1.0


def test_answer_tokens_split_at_the_training_length_by_hand():
    # prompt of 5 tokens: answer token i is predicted at position 4 + i -> positions 4, 5 | 6, 7 (L = 6)
    assert position_split(5, [1, 2, 3, 4], [1, 2, 9, 4], train_len=6) == (2, 2, 1, 2)
    assert position_split(5, [1, 2, 3, 4], [1, 2, 9, 4], train_len=100) == (3, 4, 0, 0)
    assert position_split(5, [1, 2, 3, 4], [], train_len=0) == (0, 0, 0, 4)  # nothing generated: all wrong
    assert position_split(1, [5], [5], train_len=1) == (1, 1, 0, 0)  # predicted at position 0


def test_seeds_needed_by_hand():
    from posbench.stats import seeds_needed

    # mean 0.2, sd 0.1: t_{.975, n-1} * 0.1 / sqrt(n) < 0.2 first at n = 4 (3: 4.303 * 0.1 / 1.732 = 0.248;
    # 4: 3.182 * 0.1 / 2 = 0.159); the normal approximation's 2 promised it too early
    assert seeds_needed([0.1, 0.2, 0.3]) == 4
    # mean 0.1, sd 0.2: t_{.975, n-1} * 0.2 / sqrt(n) < 0.1 first at n = 18 (17: 2.120 * 0.2 / 4.123 = 0.1028;
    # 18: 2.110 * 0.2 / 4.243 = 0.0995)
    assert seeds_needed([0.1, -0.1, 0.3]) == 18
    assert seeds_needed([0.1, -0.1]) is None  # no average difference: no seed count separates them
    assert seeds_needed([0.5]) is None  # one seed: no spread to judge by
