"""Evaluation's memory estimate counts the attention options (model/memory.py, the kernels' `forward_bytes`):
model.attention_sinks, model.attention_chunk, model.attention_gate and model.attention_temperature, each against
bytes worked by hand from the code path it takes, and each differing from the same call without it (the slow
measured check, scripts/bench_eval_memory.py's option rows, is in test_eval_memory.py)."""

import pytest

from posbench.model.attention_call import AttentionCall
from posbench.model.kernels import EagerKernel, FlexKernel, SDPAKernel
from posbench.model.memory import forward_bytes
from posbench.model.sdpa_bias_kernel import BlockedBiasKernel
from tests.evaluation.helpers import small_model

CALL = dict(B=2, H=4, T=8, S=8, K=8, Q=8)  # scores 2,048 bytes, mask 64, output 2,048
LONG = dict(B=1, H=4, T=1024, S=1024, K=8, Q=8)  # output 131,072


def pe_of(name: str, *extra):
    return small_model(name, *extra)[0].pe.layer_pe(0)  # d_model 32, 4 heads (K 8), 2 layers


def test_sinks_by_hand():
    rope, none, alibi = pe_of("rope"), pe_of("none"), pe_of("alibi")
    sinks = AttentionCall(**CALL, sinks=True)
    # sdpa: the (H, T, S + 1) float mask (1,152), the math path's scores and probabilities (2 x 2,048), the bool and
    # float (T, S) masks (5 x 64), k and v one key longer (2 x 2,304), the output
    assert SDPAKernel(rope, "cpu", 0.0).forward_bytes(sinks) == 1152 + 2 * 2048 + 5 * 64 + 2 * 2304 + 2048
    assert SDPAKernel(rope, "cpu", 0.0).forward_bytes(AttentionCall(**CALL)) == 2048
    # eager: the logits, them with the sink's column and its softmax (3 x 2,048) where plain eager holds two
    assert EagerKernel(none, "cpu", 0.0).forward_bytes(sinks) == 3 * 2048 + 3 * 64 + 2048
    assert EagerKernel(none, "cpu", 0.0).forward_bytes(AttentionCall(**CALL)) == 2 * 2048 + 3 * 64 + 2048
    # flex: the output rescaled beside it, and the log-sum-exps' share (4 x 2 x 4 x 8)
    assert FlexKernel(alibi, "cuda", 0.0).forward_bytes(sinks) == 2 * (2048 + 256)
    # sdpa_bias takes its eager path with sinks: at 1,024 tokens the eager kernel's bytes, not the far field's
    long_sinks = AttentionCall(**LONG, sinks=True)
    assert BlockedBiasKernel(alibi, "cpu", 0.0).forward_bytes(long_sinks) == \
        EagerKernel(alibi, "cpu", 0.0).forward_bytes(long_sinks) > 3 * 16 * (1 << 20)


def test_chunks_by_hand():
    rope, alibi = pe_of("rope"), pe_of("alibi")
    chunked = SDPAKernel(rope, "cpu", 0.0)
    chunked.chunk = 4
    assert chunked.forward_bytes(AttentionCall(**CALL)) == 5 * 64 + 2048  # its bool mask and SDPA's float copy
    blocked = BlockedBiasKernel(alibi, "cpu", 0.0)
    blocked.chunk = 256
    # sdpa_bias takes its eager path with chunks: the (H, T, S) bias and scores (16 MiB each), not the far field
    call = AttentionCall(**LONG)
    assert blocked.forward_bytes(call) == EagerKernel(alibi, "cpu", 0.0).forward_bytes(call) > 3 * 16 * (1 << 20)
    assert BlockedBiasKernel(alibi, "cpu", 0.0).forward_bytes(call) < 4 * (1 << 20)


def test_temperature_by_hand():
    alibi = pe_of("alibi")
    # eager, one row: the scores (1,024), the tempered bias grid (the bias, its product with the factor, their sum:
    # 3 x 1,024, over the untempered 2 x 1,024 + 8 x 64 of distance grids)
    one = dict(CALL, B=1)
    assert EagerKernel(alibi, "cpu", 0.0).forward_bytes(AttentionCall(**one, tempered=True)) == \
        1024 + 3 * 1024 + 3 * 64 + 1024
    assert EagerKernel(alibi, "cpu", 0.0).forward_bytes(AttentionCall(**one)) == \
        1024 + 2 * 1024 + 8 * 64 + 3 * 64 + 1024
    # sdpa_bias: a tempered bias has no fast form, so no far field: the (T, S) mask and blocks of 2**20 floats
    assert BlockedBiasKernel(alibi, "cpu", 0.0).forward_bytes(AttentionCall(**LONG, tempered=True)) == \
        2 * 1024 * 1024 + 3 * 4 * (1 << 20) + 2 * 131_072


BODY = 1024 * 352 * 4  # the MLP's and attention's own 352 floats a token at 1,024 tokens (test_eval_memory.py)
FAR = 4 * 4 * (1024 + 2048) * 9 + 3 * 4 * 4 * 256 * 256 + 2 * 131_072  # ALiBi's far field at 1,024 tokens
BLOCKED = 2 * 1024 * 1024 + 3 * 4 * (1 << 20) + 2 * 131_072


@pytest.mark.parametrize("extra, kernel", [
    ((), FAR),
    (("model.attention_temperature.name=log_n",), BLOCKED),  # every layer tempered: no fast form
    # llama4 tempers NoPE layers only: ALiBi's keep their fast form (on ALiBi alone it would do nothing: refused)
    (("pe.pattern=[{name: alibi}, {name: none}]", "model.attention_temperature.name=llama4"), FAR),
])
def test_the_body_counts_the_temperature_of_each_layer(extra, kernel):
    model, cfg = small_model("hybrid" if "llama4" in str(extra) else "alibi", *extra)
    assert forward_bytes(cfg.model, model.pe, "cpu", 1, 1024) == BODY + kernel


def test_the_body_counts_sinks_and_chunks():
    model, cfg = small_model("rope", "model.attention_sinks=true")
    # SDPA with sinks at 10 tokens: the (H, T, S + 1) mask 1,760, scores and probabilities 2 x 1,600, the (T, S)
    # masks 5 x 100, k and v 2 x 1,408, the output 1,280
    assert forward_bytes(cfg.model, model.pe, "cpu", 1, 10) == 10 * 352 * 4 + 1760 + 3200 + 500 + 2816 + 1280
    model, cfg = small_model("rope", "model.attention_chunk=4")
    assert forward_bytes(cfg.model, model.pe, "cpu", 1, 10) == 10 * 352 * 4 + 5 * 100 + 1280


@pytest.mark.parametrize("gate, width", [("none", 0), ("elementwise", 2 * 32), ("headwise", 4 + 32)])
def test_the_body_counts_the_gate_after_the_kernel(gate, width):
    """After the kernel its output (1,280 bytes at 10 tokens) and the gate: its projection and sigmoid (2 x D wide)
    or, headwise, its sigmoid (H) beside the gated output (D)."""
    model, cfg = small_model("rope", f"model.attention_gate={gate}")
    assert forward_bytes(cfg.model, model.pe, "cpu", 1, 10) == 10 * 352 * 4 + 1280 + 10 * width * 4
