"""Inputs that trained, died late or renamed a run: each is now one line `error: ...` with exit 2 before
any work, and nothing written (the harness of tests/cli/test_bad_inputs.py)."""

import os
import subprocess
import sys

import pytest

from tests.cli.test_bad_inputs import NANO, ROOT

HYBRID = ["--pe-type", "hybrid"]  # RoPE, RoPE, RoPE, NoPE: a model with a NoPE layer


def _eval(*flags):
    return lambda tmp: ["eval.py", "no_such_ckpt", "--suite", "ppl", "--out", "ev", *flags]


# case -> (command, text the one line must contain); the hardening item in the name
CASES = {
    # 4: options that do nothing are refused, not named in the run
    "item4_qk_norm_weight_without_qk_norm": (
        ["train.py", *NANO, "model.qk_norm=false", "model.qk_norm_weight=false", "train.out_dir=o"],
        "model.qk_norm_weight=false does nothing with model.qk_norm=false"),
    "item4_qk_norm_layers_without_qk_norm": (
        ["train.py", *NANO, "model.qk_norm=false", "model.qk_norm_layers=positional", "train.out_dir=o"],
        "model.qk_norm_layers=positional does nothing with model.qk_norm=false"),
    "item4_qk_norm_layers_without_a_nope_layer": (
        ["train.py", *NANO, "model.qk_norm_layers=positional", "train.out_dir=o"],
        "model.qk_norm_layers=positional does nothing: no layer of this model is position-free"),
    "item4_llama4_temperature_without_a_nope_layer": (
        ["train.py", *NANO, "model.attention_temperature.name=llama4", "train.out_dir=o"],
        "model.attention_temperature=llama4 does nothing: it tempers only position-free layers "
        "(attention_temperature.nope_layers_only=true) and no layer of this model is position-free (pe.name=rope)"),
    # 7: thread counts have an upper bound, the same in every command
    "item7_train_threads_1e9": (["train.py", *NANO, "train.threads=1000000000", "train.out_dir=o"],
                                "train.threads=1,000,000,000 is more than 1,024 threads"),
    "item7_eval_threads_1e9": (["eval.py", "no_such_ckpt", "--threads", "1000000000", "--out", "ev"],
                               "threads=1,000,000,000 is more than 1,024 threads"),
    "item7_eval_threads_20_digits": (["eval.py", "no_such_ckpt", "--threads", "99999999999999999999", "--out", "ev"],
                                     "threads: 99999999999999999999 is out of range"),
    # 8: FlexAttention has no CPU backward: refused when the training model is built, before the run directory
    "item8_flex_on_cpu_training": (["train.py", *NANO, "model.attention=flex", "train.device=cpu", "train.out_dir=o"],
                                   "model.attention=flex cannot train PE `rope` on cpu: FlexAttention has no backward "
                                   "pass on cpu"),
    # 9: a temperature parameter that is not a finite number is bad input, not a diverged run
    "item9_ssmax_init_nan": (["train.py", *NANO, "model.attention_temperature.name=ssmax",
                              "model.attention_temperature.init=.nan", "train.out_dir=o"],
                             "model.attention_temperature.init must be a finite number, got nan"),
    "item9_llama4_scale_inf": (["train.py", *NANO, *HYBRID, "model.attention_temperature.name=llama4",
                                "model.attention_temperature.scale=.inf", "train.out_dir=o"],
                               "model.attention_temperature.scale must be a finite number, got inf"),
    "item9_log_n_base_huge": (["train.py", *NANO, "model.attention_temperature.name=log_n",
                               "model.attention_temperature.base_len=1e300", "train.out_dir=o"],
                              "model.attention_temperature.base_len"),
    # 13: a chunk no integer setting can hold, or one longer than any sequence, names the setting
    "item13_attention_chunk_1e20": (["train.py", *NANO, "model.attention_chunk=1e20", "train.out_dir=o"],
                                    "model.attention_chunk: 100000000000000000000 is out of range"),
    "item13_attention_chunk_beyond_2_24": (["train.py", *NANO, "model.attention_chunk=1e9", "train.out_dir=o"],
                                           "model.attention_chunk=1000000000 is longer than any sequence"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_round_four_bad_input_is_one_line_before_any_work(tmp_path, case):
    args, text = CASES[case]
    before = sorted(tmp_path.rglob("*"))
    env = {**os.environ, "POSBENCH_DEBUG": "0", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / args[0]), *args[1:]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], proc.stderr[-2000:]
    assert sorted(p for p in tmp_path.rglob("*") if "__pycache__" not in p.parts) == before  # nothing written


@pytest.mark.parametrize("script", ["scripts/bench_train.py", "scripts/bench_long_context.py",
                                    "scripts/bench_eval.py"])
def test_item7_bench_threads_are_bounded_at_parse_time(tmp_path, script):
    proc = subprocess.run([sys.executable, str(ROOT / script), "--threads", "1000000000"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "--threads: 1000000000 is more than 1,024 threads" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not list(tmp_path.iterdir())
