"""Per-size hyperparameters: the presets hold the rule's output, and the rule is the documented one."""

import math
import subprocess
import sys

import pytest

from posbench.config import load_config
from posbench.training.hparam_scaling import Anchor, derive, mismatches, size_stats

SIZES = ["tiny", "small", "medium", "large"]


@pytest.mark.parametrize("size", SIZES)
def test_presets_agree_with_the_rule(size):
    assert mismatches(size) == []
    cfg = load_config(model_size=size)
    per_step = cfg.train.micro_batch * cfg.model.seq_len
    for gpus in (1, 2, 4, 8):  # the batch divides over common node sizes
        assert cfg.train.global_batch_tokens % (per_step * gpus) == 0


def test_rule_by_hand_from_the_reference_anchor():
    anchor = Anchor("tiny", 6e-4, 65536, 100)
    n0, c0 = size_stats(load_config(model_size="tiny"))
    for size in SIZES:
        n, c = size_stats(load_config(model_size=size))
        d = derive(size, anchor)
        assert d.lr == pytest.approx(6e-4 * math.sqrt(n0 / n), rel=0.05)  # 2 significant digits
        ratio = d.global_batch_tokens / (65536 * (c / c0) ** 0.3271)
        assert 2 ** -0.5 <= ratio <= 2 ** 0.5 and d.global_batch_tokens & (d.global_batch_tokens - 1) == 0
        assert d.warmup_tokens == round(100 * math.sqrt(n / n0)) * d.global_batch_tokens
    assert [derive(s, anchor).lr for s in SIZES] == [6e-4, 3.6e-4, 2.1e-4, 1.3e-4]


def test_larger_sizes_get_smaller_lr_and_larger_batches():
    cfgs = [load_config(model_size=s) for s in SIZES]
    assert [c.optim.lr for c in cfgs] == sorted((c.optim.lr for c in cfgs), reverse=True)
    assert len({c.optim.lr for c in cfgs}) == 4
    assert [c.train.global_batch_tokens for c in cfgs] == [262144, 524288, 1048576, 2097152]


def test_a_yaml_file_overrides_the_size_preset(tmp_path):
    f = tmp_path / "lr.yaml"
    f.write_text("optim: {lr: 5.0e-4}\n")
    assert load_config([f], model_size="large").optim.lr == 5e-4
    assert load_config([f], ["optim.lr=1e-4"], model_size="large").optim.lr == 1e-4


def test_script_check_and_table():
    out = subprocess.run([sys.executable, "scripts/scale_hyperparams.py", "--check"], capture_output=True, text=True)
    assert out.returncode == 0 and "agree" in out.stdout
    out = subprocess.run([sys.executable, "scripts/scale_hyperparams.py", "--anchor", "small", "--lr", "6e-4",
                          "--batch-tokens", "524288", "--warmup-steps", "167", "--sizes", "tiny", "large"],
                         capture_output=True, text=True, check=True)
    assert "large: optim.lr=0.00022 train.global_batch_tokens=2097152" in out.stdout
    out = subprocess.run([sys.executable, "scripts/scale_hyperparams.py", "--anchor", "tiyn"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "tiny" in out.stderr
