"""sdpa_dense: training through SDPA with the layer's whole bias as a float mask (model/sdpa_bias_kernel.py
DenseBiasKernel) gives the eager reference's logits and gradients, PE parameters included; `auto` picks it on CUDA
for a learned bias only (model/attention_plan.py `learned_bias`)."""

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

from posbench.model.attention_plan import BiasCall, BiasPath, auto_kernel_name, plan_bias_call
from tests.model.option_helpers import model_with

LEARNED = ["t5", "kerple_log", "kerple_power", "fire", "relative_learned"]


def logits_and_grads(attention: str, *overrides):
    """A nano model's training logits and every gradient, its PE parameters moved off their init (tables that start
    at zero would hide a kernel that drops the bias)."""
    cfg, model = model_with(f"model.attention={attention}", *overrides)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in model.pe.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    model.train()
    ids = torch.randint(2, cfg.model.vocab_size, (2, 41), generator=torch.Generator().manual_seed(2))
    ids[0, 17] = ids[1, 5] = 1  # document starts, for the packing cases
    logits = model(ids[:, :-1]).logits
    F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads, model


def assert_same(a, b):
    (la, ga, _), (lb, gb, _) = a, b
    torch.testing.assert_close(la, lb, rtol=1e-5, atol=1e-5)
    assert ga.keys() == gb.keys()
    for name in ga:
        torch.testing.assert_close(ga[name], gb[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("pe", LEARNED)
def test_dense_training_equals_eager(pe):
    # FIRE's threshold inside the window: queries past it are not a function of distance (the score_mod's grid)
    over = [f"pe.name={pe}", *(["pe.threshold_init=9"] if pe == "fire" else [])]
    dense, eager = logits_and_grads("sdpa_dense", *over), logits_and_grads("eager", *over)
    assert_same(dense, eager)
    pe_grads = [n for n in dense[1] if n.startswith("pe.")]
    assert pe_grads and all(float(dense[1][n].abs().sum()) > 0 for n in pe_grads)  # the bias's parameters learn


@pytest.mark.parametrize("extra", [
    ("model.packing.mask=document", "model.packing.positions=document", "model.packing.bos_id=1"),
    ("model.attention_window=7",),
    ("model.attention_chunk=16",),
    ("model.attention_temperature.name=log_n",),
], ids=["documents", "window", "chunk", "temperature"])
def test_dense_training_equals_eager_with_options(extra):
    assert_same(logits_and_grads("sdpa_dense", "pe.name=t5", *extra), logits_and_grads("eager", "pe.name=t5", *extra))


def test_dense_without_autograd_is_sdpa_bias():
    call = dict(bias="score", dropout=False, documents=False, per_row=False, window=False, device="cpu", H=4, T=8,
                S=8, table_rows=lambda: 8, dense_grad=True)
    assert plan_bias_call(BiasCall(grad=True, **call)) is BiasPath.DENSE
    assert plan_bias_call(BiasCall(grad=False, **call)) is BiasPath.ONE_BLOCK_TABLE
    assert plan_bias_call(BiasCall(grad=True, **{**call, "dense_grad": False})) is BiasPath.EAGER
    assert plan_bias_call(BiasCall(grad=True, sinks=True, **call)) is BiasPath.EAGER  # sinks: eager's softmax


@pytest.mark.parametrize("pe,cuda", [("t5", "sdpa_dense"), ("kerple_log", "sdpa_dense"), ("fire", "sdpa_dense"),
                                     ("relative_learned", "sdpa_dense"), ("alibi", "flex"), ("fox", "flex"),
                                     ("rope", "sdpa"), ("cope", "eager")])
def test_auto_picks_dense_for_a_learned_bias_on_cuda_only(pe, cuda):
    _, model = model_with(f"pe.name={pe}")
    assert auto_kernel_name(model.pe.layer_pe(0), "cuda") == cuda
    assert auto_kernel_name(model.pe.layer_pe(0), "cpu") != "sdpa_dense"  # CPU training keeps the eager reference


def test_dense_training_runs_sdpa():
    """The dense path, not the eager reference, is what trains: SDPA is called in the training forward."""
    with torch.profiler.profile() as prof:
        logits_and_grads("sdpa_dense", "pe.name=fire")
    ops = {e.key for e in prof.key_averages()}
    assert "aten::scaled_dot_product_attention" in ops
    with torch.profiler.profile() as prof:
        logits_and_grads("sdpa_bias", "pe.name=fire")
    assert "aten::scaled_dot_product_attention" not in {e.key for e in prof.key_averages()}


@pytest.mark.parametrize("pe", ["t5", "fire"])
def test_compiled_dense_training_equals_eager(pe):
    """Under torch.compile (as train.compile runs it, graph breaks allowed) the bias is made outside the graph, by
    the same code: logits and gradients as the eager kernel's."""
    over = [f"pe.name={pe}", *(["pe.threshold_init=9"] if pe == "fire" else [])]
    _, ref_grads, ref_model = logits_and_grads("eager", *over)
    cfg, model = model_with("model.attention=sdpa_dense", *over)
    model.load_state_dict(ref_model.state_dict())
    model.train()
    assert not any(b.attn.kernel.compiles_whole for b in model.blocks)
    ids = torch.randint(2, cfg.model.vocab_size, (2, 41), generator=torch.Generator().manual_seed(2))
    ids[0, 17] = ids[1, 5] = 1
    # the bias leaves the graph at `_dense_bias` (the lazily imported disable of sdpa_bias_kernel.py), one per layer
    reasons = [str(r.reason) for r in torch._dynamo.explain(model)(ids[:, :-1]).break_reasons]
    assert sum("_dense_bias" in r and "skipped" in r for r in reasons) >= cfg.model.n_layers, reasons
    compiled = torch.compile(model, backend="aot_eager")
    logits = compiled(ids[:, :-1]).logits
    F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
    for name, g in ref_grads.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, g, rtol=1e-4, atol=1e-6, msg=name)
