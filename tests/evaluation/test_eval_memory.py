"""Evaluation's memory check counts what each PE and kernel allocates (model/memory.py, the kernels' and PEs'
hooks, evaluation/lengths.py): the formulas against hand-computed bytes, a length far beyond memory refused with
exit 2 before anything is allocated, and (slow) the estimate within 1.5x of measured peak RSS."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posbench.evaluation import lengths
from posbench.evaluation.eval_config import load_eval_config
from posbench.evaluation.eval_runner import footprint, plan
from posbench.evaluation.evaluator import Target
from posbench.evaluation.loading import inspect_checkpoint
from posbench.memory_probe import Available
from posbench.model.attention_call import AttentionCall
from posbench.model.kernels import EagerKernel, SDPAKernel
from posbench.model.memory import forward_bytes
from posbench.model.sdpa_bias_kernel import BlockedBiasKernel
from posbench.pe import PES
from tests.conftest import build_test_model
from tests.evaluation.helpers import BYTES, model_config, nano_checkpoint

ROOT = Path(__file__).resolve().parents[2]


def pe_of(name: str, layer: int = 0):
    return build_test_model(name).pe.layer_pe(layer)  # d_model 32, 4 heads (K 8), 4 layers, seq_len 64


@pytest.mark.parametrize("name", PES.names())
def test_qk_dim_is_the_width_rotate_returns(name):
    model = build_test_model(name)
    for layer in range(model.cfg.n_layers):
        pe = model.pe.layer_pe(layer)
        q, k = pe.rotate(torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8), pe.positions(5, "cpu"))
        assert q.shape[-1] == k.shape[-1] == pe.speed.qk_dim(8), (name, layer)


def test_pe_hooks_by_hand():
    assert pe_of("rope").speed.qk_dim(8) == 8 and pe_of("pope").speed.qk_dim(8) == 16
    assert pe_of("rope").speed.logits_mod_bytes(2, 3, 5, 7) == 0
    # CoPE: 9 float32 (B, H, T, S) at its peak and q . e[n] over npos_max = seq_len + 1 = 65 positions
    assert pe_of("cope").speed.logits_mod_bytes(2, 3, 5, 7) == 4 * 2 * 3 * 5 * (9 * 7 + 65) == 15_360


def test_kernel_costs_by_hand():
    call = AttentionCall(B=2, H=4, T=8, S=8, K=8, Q=8)  # scores 2,048 bytes, mask 64, output 2,048
    assert (call.scores, call.mask, call.out) == (2048, 64, 2048)
    assert SDPAKernel(pe_of("rope"), "cpu", 0.0).forward_bytes(call) == 2048  # fused: the output
    assert SDPAKernel(pe_of("rope"), "cpu", 0.0, window=3).forward_bytes(call) == 5 * 64 + 2048  # bool + float mask
    wide = AttentionCall(B=2, H=4, T=8, S=8, K=8, Q=16)  # PoPE: the math path's scores and probabilities
    assert SDPAKernel(pe_of("pope"), "cpu", 0.0).forward_bytes(wide) == 2 * 2048 + 5 * 64 + 2048
    assert EagerKernel(pe_of("none"), "cpu", 0.0).forward_bytes(call) == 2 * 2048 + 3 * 64 + 2048
    # alibi: the (H, T, S) bias (1,024) beside the scores and their sum
    assert EagerKernel(pe_of("alibi"), "cpu", 0.0).forward_bytes(call) == 2 * 2048 + 1024 + 3 * 64 + 2048
    # CoPE: the masked matrix and its logits_mod (4 x 2 x 4 x 8 x (9 x 8 + 65) = 35,072)
    assert EagerKernel(pe_of("cope"), "cpu", 0.0).forward_bytes(call) == 2048 + 35_072 + 3 * 64 + 2048
    # sdpa_bias: one block up to 2**20 bias entries; past it ALiBi's far field (linear in T: q, k, v one channel
    # wider, a 256-query chunk's near mask) and KERPLE's (T, S) bool mask plus blocks of about 2**20 floats
    assert BlockedBiasKernel(pe_of("alibi"), "cpu", 0.0).forward_bytes(call) == 3 * 4 * 4 * 64 + 2048
    long = AttentionCall(B=1, H=4, T=1024, S=1024, K=8, Q=8)  # output 131,072
    assert BlockedBiasKernel(pe_of("alibi"), "cpu", 0.0).forward_bytes(long) == \
        4 * 4 * (1024 + 2048) * 9 + 3 * 4 * 4 * 256 * 256 + 2 * 131_072
    assert BlockedBiasKernel(pe_of("kerple_log"), "cpu", 0.0).forward_bytes(long) == \
        2 * 1024 * 1024 + 3 * 4 * (1 << 20) + 2 * 131_072


def test_the_body_is_its_worst_layer():
    cfg = model_config("rope").model  # d_model 32, 4 heads, d_ff 64
    pe = build_test_model("rope").pe
    # attention: 7 D + 4 H Q = 352 floats a token, plus the kernel's output; MLP: 3 D + 4 F = 352 floats
    assert forward_bytes(cfg, pe, "cpu", 1, 10) == 10 * 352 * 4 + 4 * 4 * 10 * 8
    cope = model_config("cope").model
    # eager with a logits_mod: the masked scores (1,600), CoPE's peak beside them, the mask's 3 bools, the output
    kernel = 4 * 4 * 10 * 10 + 4 * 4 * 10 * (9 * 10 + 65) + 3 * 100 + 4 * 4 * 10 * 8
    assert forward_bytes(cope, build_test_model("cope").pe, "cpu", 1, 10) == 10 * 352 * 4 + kernel
    assert forward_bytes(cfg, None, "cpu", 1, 10) == 10 * 352 * 4  # no attention (Mamba): the MLP


LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a real attempt fails with a MemoryError instead
from posbench.cli.main import main
raise SystemExit(main(["eval", sys.argv[1], "--suite", "ppl", "--lengths", str(2**20), "--out", "ev",
                       "--no-progress", "--device", "cpu"]))
"""


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return {pe: nano_checkpoint(root, pe) for pe in ("cope", "pope")}


@pytest.mark.parametrize("pe", ["cope", "pope"])
def test_a_length_far_beyond_memory_is_refused_before_any_allocation(ckpts, tmp_path, pe):
    """CoPE's gates and PoPE's unfused scores at 2**20 tokens are terabytes: exit 2 at planning, naming the estimate,
    the machine's memory and the longest length that fits (PoPE was counted as holding no scores, and admitted)."""
    proc = subprocess.run([sys.executable, "-c", LIMITED, str(ckpts[pe])], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "POSBENCH_DEBUG": "0", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert re.fullmatch(r"error: .*\(--suite ppl\): a 1,048,576-token context needs about [\d,.]+ GiB \(1 row\(s\) of "
                        r"one forward pass, weights included; d_model 64\) but cpu has [\d,.]+ GiB available "
                        r"\([^)]*\); the longest that fits is [\d,]+ tokens: choose shorter lengths\n",
                        proc.stderr), proc.stderr[-2000:]
    assert not (tmp_path / "ev").exists()


def test_the_longest_length_named_fits_and_one_more_does_not(ckpts, monkeypatch):
    monkeypatch.setattr(lengths, "available", lambda device: Available(1 << 30, "a test"))  # a 1 GiB machine
    cfg = load_eval_config(overrides=["suites=[ppl]", "lengths=[65536]"])
    with pytest.raises(lengths.ConfigError, match=r"the longest that fits is ([\d,]+) tokens") as e:
        plan([str(ckpts["cope"])], cfg, torch.device("cpu"))
    fits = int(re.search(r"fits is ([\d,]+) tokens", str(e.value)).group(1).replace(",", ""))
    step_dir, run_cfg, meta_model = inspect_checkpoint(str(ckpts["cope"]))
    target = Target("m", step_dir, run_cfg, BYTES, [65536], 0, cfg.batch_size)
    fp = footprint("ppl", cfg, target, meta_model, torch.device("cpu"))
    assert 64 < fits < 65536 and fp.need(fits) <= 1 << 30 < fp.need(fits + 1)


def test_generation_counts_the_cache_and_the_prompts_logits():
    cfg = model_config("rope").model  # 2 layers, d_model 32, vocabulary 300
    pe = build_test_model("rope", n_layers=2).pe
    L, B = 100, 3
    fp = lengths.Footprint(cfg, pe, "cpu", 1000, lambda L: B, generates=True)
    body = forward_bytes(cfg, pe, "cpu", B, L)
    cache = 2 * B * L * 4 * (8 + 8) * 4
    assert fp.need(L) == 1000 + cache + max(body, B * L * 32 * 4 + B * L * 300 * 4)


@pytest.mark.slow
def test_the_estimate_is_within_1_5x_of_measured_peak_rss():
    """scripts/bench_eval_memory.py at 2,048 tokens, every row, attention options included (~35 s: two measuring
    processes at a time, each measuring half the rows in turn, which the script's --help says reads a row up to
    2.5 MiB lower than a process of its own: far inside the 1.5x)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bench_eval_memory
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    rows = bench_eval_memory.main(["--lengths", "2048", "--jobs", "2", "--cases-per-process", "13"])
    assert {r["row"] for r in rows} == set(bench_eval_memory.ROWS)
    for r in rows:
        assert 1 / 1.5 <= r["ratio"] <= 1.5, r
