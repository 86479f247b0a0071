"""The study scorer's rows per forward: every row at the short lengths the presets train at, fewer for long rows so
that 16 float32 score matrices stay within 2 GiB (a forward of 128 rows of 1,024 tokens was OOM-killed at 12.4 GB);
splitting a split into forwards changes no count."""

import torch

from posbench.evaluation.task_accuracy import score_rows
from posbench.studies.cell import scoring_rows
from tests.evaluation.helpers import small_model


def test_rows_per_forward_by_hand():
    assert scoring_rows(4, 64) == 256 and scoring_rows(4, 181) == 256  # 16 x 4 B x 4 heads x 181^2 x 256 < 2 GiB
    assert scoring_rows(4, 1024) == 8  # 2^31 / (16 x 4 x 4 x 2^20)
    assert scoring_rows(2, 512) == 64 and scoring_rows(4, 4096) == 1 and scoring_rows(4, 32, most=10) == 10


def test_a_split_scored_in_small_forwards_counts_what_one_forward_counts():
    model, _ = small_model("stick_breaking", seq_len=16)
    torch.manual_seed(1)
    x = torch.randint(0, 256, (10, 24))
    y = torch.where(torch.rand(10, 24) < 0.5, torch.randint(0, 256, (10, 24)), torch.full((10, 24), -100))
    y[:, 20:] = x[:, 20:]  # targets past the training length on every row
    whole, parts = score_rows(model, x, y, train_len=16), score_rows(model, x, y, train_len=16, batch_size=3)
    assert parts.per_position == whole.per_position and parts.per_example == whole.per_example
    assert (parts.acc, parts.exact, parts.within, parts.beyond) == (whole.acc, whole.exact, whole.within, whole.beyond)
    assert abs(parts.loss - whole.loss) < 1e-5
