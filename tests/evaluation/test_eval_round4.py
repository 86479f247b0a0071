"""Evaluation: the length check under the process's own memory limit (item 5), first_token priced for
every layer it keeps (item 6), and --ppl-text reaching every suite that reads the perplexity text (item 10)."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from posbench.cli.main import main
from posbench.evaluation import lengths
from posbench.evaluation.eval_config import load_eval_config
from posbench.evaluation.eval_runner import footprint, plan
from posbench.evaluation.evaluator import Target
from posbench.evaluation.loading import inspect_checkpoint
from posbench.memory_probe import Available
from tests.evaluation.helpers import BYTES, nano_checkpoint, write_text


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return {"root": root, "stick": nano_checkpoint(root, "stick_breaking"),
            "deep": nano_checkpoint(root, "rope", "model.n_layers=12", run_name="deep"),
            "text": write_text(root / "held_out.txt", n_words=600),
            "long_text": write_text(root / "long.txt", n_words=4000)}  # over 8,192 byte tokens


LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # `ulimit -v 3145728`
from posbench.cli.main import main
raise SystemExit(main(["eval", sys.argv[1], "--suite", "ppl", "--lengths", "8192", "--out", "ev", "--no-progress",
                       "--device", "cpu", "--set", "ppl.protocols=[nonoverlap]", "--set", "ppl.max_tokens=8192",
                       "--ppl-text", sys.argv[2]]))
"""


def test_item5_a_length_beyond_the_address_space_limit_is_refused_at_planning(runs, tmp_path):
    """Stick-breaking's eager (B, H, L, L) scores at 8,192 tokens need more than a 3 GiB address space holds: exit 2
    naming RLIMIT_AS at planning (the check read the physical memory, admitted it, and the run died in the
    allocator with a traceback)."""
    proc = subprocess.run([sys.executable, "-c", LIMITED, str(runs["stick"]), str(runs["long_text"])], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "POSBENCH_DEBUG": "0", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert re.fullmatch(r"error: .*\(--suite ppl\): a 8,192-token context needs about [\d,.]+ GiB .* but cpu has "
                        r"[\d,.]+ GiB available \(RLIMIT_AS\); the longest that fits is [\d,]+ tokens: choose shorter "
                        r"lengths\n", proc.stderr), proc.stderr[-2000:]
    assert not (tmp_path / "ev").exists()


def test_item6_first_token_is_priced_for_every_layer_it_keeps(runs):
    """12 layers of (B, H, L, L) float32 probabilities are kept until the last is made, with two more layers' worth
    beside them (the one being computed, or the float64 copy first_token_mass reads): hand-computed here."""
    cfg = load_eval_config(overrides=["suites=[first_token]", "lengths=[1024]"])
    step_dir, run_cfg, meta_model = inspect_checkpoint(str(runs["deep"]))
    target = Target("m", step_dir, run_cfg, BYTES, [1024], 0, cfg.batch_size)
    fp = footprint("first_token", cfg, target, meta_model, torch.device("cpu"))
    rows = max(1, cfg.batch_size * 64 // 1024)  # batch_size x train_len tokens per forward
    kept = (12 + 2) * 4 * rows * run_cfg.model.n_heads * 1024 * 1024
    ppl = footprint("ppl", cfg, target, meta_model, torch.device("cpu"))
    assert fp.need(1024) - fp.weights - fp.forward(1024) == kept
    assert fp.need(1024) > ppl.need(1024) + kept - 1  # the suite's own probabilities on top of the forward


def test_item6_first_token_s_longest_fit_is_for_all_layers(runs, monkeypatch):
    """On a 1 GiB process the longest length named for first_token holds all 12 layers' probabilities; priced as one
    layer it was ~sqrt(12)x longer (quadratic in L)."""
    monkeypatch.setattr(lengths, "available", lambda device: Available(1 << 30, "a test"))
    cfg = load_eval_config(overrides=["suites=[first_token]", "lengths=[16384]"])
    with pytest.raises(lengths.ConfigError, match=r"the longest that fits is ([\d,]+) tokens") as e:
        plan([str(runs["deep"])], cfg, torch.device("cpu"))
    fits = int(re.search(r"fits is ([\d,]+) tokens", str(e.value)).group(1).replace(",", ""))
    heads = 4 * inspect_checkpoint(str(runs["deep"]))[1].model.n_heads
    assert 14 * heads * fits * fits <= 1 << 30  # one row at these lengths: 14 layers' worth of (H, L, L) float32


def test_item10_ppl_text_reaches_first_token_beside_ppl(runs, tmp_path):
    out = tmp_path / "ev"
    code = main(["eval", str(runs["deep"]), "--suite", "ppl,first_token", "--ppl-text", str(runs["text"]),
                 "--lengths", "64", "--out", str(out), "--no-progress", "--device", "cpu",
                 "--set", "ppl.max_tokens=128",
                 "--set", "ppl.protocols=[nonoverlap]", "--set", "first_token.max_windows=2"])
    assert code == 0
    suites = json.loads((out / "results.json").read_text())["suites"]
    assert "held_out.txt" in suites["ppl"]["data"] and suites["first_token"]["data"] == suites["ppl"]["data"]
    assert suites["first_token"]["rows"][0]["windows"] == 2
