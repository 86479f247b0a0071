"""Evaluation lengths that cannot be run are refused before any prompt is built (evaluation/lengths.py): past
2**24 tokens (float32 positions) for any suite, and past what one forward pass can hold on the device."""

import os
import subprocess
import sys

import pytest
import torch

from posbench.errors import ConfigError
from posbench.evaluation import lengths
from posbench.evaluation.eval_config import load_eval_config
from posbench.evaluation.eval_runner import plan
from posbench.memory_probe import Available
from tests.evaluation.helpers import nano_checkpoint

LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # before this check: a MemoryError after ~40 s
from posbench.cli.main import main
raise SystemExit(main(["eval", sys.argv[1], "--suite", sys.argv[2], "--lengths", "1e8", "--out", "ev",
                       "--no-progress", "--device", "cpu"]))
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return nano_checkpoint(tmp_path_factory.mktemp("ckpt"), "rope")


@pytest.mark.parametrize("suite", ["passkey", "niah"])
def test_a_length_past_two_to_the_24_is_refused_at_once(run, tmp_path, suite):
    proc = subprocess.run([sys.executable, "-c", LIMITED, str(run), suite], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "POSBENCH_DEBUG": "0", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr == ("error: lengths: 100,000,000 tokens is beyond the longest context evaluated here, "
                           "2**24 = 16,777,216 tokens (positions are float32, exact integers only up to 2**24)\n")
    assert not (tmp_path / "ev").exists()


def test_a_suites_own_lengths_are_bounded_too():
    with pytest.raises(ConfigError, match=r"passkey.lengths: 100,000,000 tokens is beyond"):
        load_eval_config(overrides=["passkey.lengths=[64, 1e8]"])
    with pytest.raises(ConfigError, match=r"lengths must be >= 2 tokens, got \[1\]"):
        load_eval_config(overrides=["lengths=[1]"])


def test_a_length_the_device_cannot_hold_names_the_checkpoint_and_suite(run, monkeypatch):
    monkeypatch.setattr(lengths, "available", lambda device: Available(1 << 30, "a test"))  # a 1 GiB machine
    cfg = load_eval_config(overrides=["suites=[niah]", "lengths=[1000000]"])
    with pytest.raises(ConfigError, match=r"\(--suite niah\): a 1,000,000-token context needs about [\d.]+ GiB \(8 "
                                          r"row\(s\) of one forward pass, weights included; d_model 64\) but cpu has "
                                          r"1.0 GiB available \(a test\); the longest that fits is [\d,]+ tokens: "
                                          r"choose shorter lengths"):
        plan([str(run)], cfg, torch.device("cpu"))
    assert plan([str(run)], load_eval_config(overrides=["suites=[niah]", "lengths=[128]"]), torch.device("cpu"))
