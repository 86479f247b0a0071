import math

import pytest

from posbench.config import ScheduleConfig
from posbench.errors import ConfigError
from posbench.training.schedule import make_schedule


def test_wsd_phases_by_hand():
    s = make_schedule(ScheduleConfig(warmup_tokens=100, decay_frac=0.25, decay="linear"), 1.0, 1000, 1000)
    assert [s.lr(t) for t in (0, 50, 100, 500, 749)] == [0.0, 0.5, 1.0, 1.0, 1.0]
    assert s.decay_start == 750
    assert s.lr(750) == 1.0 and s.lr(875) == pytest.approx(0.5) and s.lr(1000) == 0.0 and s.lr(2000) == 0.0


@pytest.mark.parametrize("shape,expected", [("linear", 0.75), ("1-sqrt", 1 - math.sqrt(0.25)),
                                            ("cosine", 0.5 * (1 + math.cos(math.pi / 4)))])
def test_decay_shapes_quarter_way(shape, expected):
    s = make_schedule(ScheduleConfig(warmup_tokens=0, warmup_frac=0, decay_frac=0.4, decay=shape,
                                     min_lr_ratio=0.0), 2.0, 1000, 1000)
    assert s.lr(600 + 100) == pytest.approx(2.0 * expected)


def test_min_lr_ratio_floor():
    s = make_schedule(ScheduleConfig(warmup_frac=0, decay_frac=0.5, decay="linear", min_lr_ratio=0.1), 1.0, 100, 100)
    assert s.lr(100) == pytest.approx(0.1) and s.lr(75) == pytest.approx(0.55)


def test_budgets_share_warmup_and_stable_phase():
    cfg = ScheduleConfig(warmup_frac=0.1, decay_frac=0.2)
    small, large = make_schedule(cfg, 1.0, 1000, 1000), make_schedule(cfg, 1.0, 2000, 1000)
    assert small.warmup_tokens == large.warmup_tokens == 100
    assert all(small.lr(t) == large.lr(t) for t in range(0, small.decay_start, 7))


def test_schedule_that_does_not_add_up():
    with pytest.raises(ConfigError, match="does not add up"):
        make_schedule(ScheduleConfig(warmup_tokens=900, decay_frac=0.2), 1.0, 1000, 1000)
