"""model.matmul=onednn (model/matmul.py): the oneDNN linear layers compute F.linear's products and gradients
in float32 (checked against a float64 reference, so a bf16/tf32 down-conversion would fail), keep the model's
parameters, state dict and tied weights, and train as the torch path does up to float rounding."""

import pytest
import torch
import torch.nn.functional as F

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.model import matmul as matmul_module
from posbench.model.build import build_model
from posbench.model.matmul import OneDNNLinear

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


def _linear(i, o, bias, seed=0):
    torch.manual_seed(seed)
    lin = torch.nn.Linear(i, o, bias=bias)
    fast = OneDNNLinear(i, o, bias=bias)
    fast.load_state_dict(lin.state_dict())
    return lin, fast


# (in, out): in < out and in > out take the two dW branches; (5, 7) is the study's tiny LM head shape
@pytest.mark.parametrize("i,o", [(32, 96), (64, 16), (7, 5), (128, 7)])
@pytest.mark.parametrize("bias", [False, True])
def test_products_and_gradients_match_float64(i, o, bias):
    lin, fast = _linear(i, o, bias)
    x = torch.randn(4, 9, i, requires_grad=True)  # 3-D, as the model's (B, T, D) activations
    dy = torch.randn(4, 9, o)
    ref_lin = torch.nn.Linear(i, o, bias=bias).double()
    ref_lin.load_state_dict(lin.state_dict())
    x64 = x.detach().double().requires_grad_()
    y_ref = ref_lin(x64)
    y_ref.backward(dy.double())
    y = fast(x)
    y.backward(dy)
    assert y.shape == y_ref.shape and y.dtype == torch.float32
    for got, want in [(y, y_ref), (x.grad, x64.grad), (fast.weight.grad, ref_lin.weight.grad)] + (
            [(fast.bias.grad, ref_lin.bias.grad)] if bias else []):
        scale = want.abs().max().item()
        assert (got.double() - want).abs().max().item() <= 2e-6 * scale, (got.shape, scale)


def test_non_contiguous_input_and_gradient():
    """A transposed activation (attention's output before its projection) and a gradient arriving as a view."""
    lin, fast = _linear(16, 24, False)
    base = torch.randn(5, 16, 3)
    x1 = base.transpose(1, 2).requires_grad_()
    x2 = base.transpose(1, 2).detach().clone().requires_grad_()
    (fast(x1) * torch.arange(24.0)).sum().backward()
    (lin(x2) * torch.arange(24.0)).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.weight.grad, lin.weight.grad, rtol=1e-5, atol=1e-6)


def test_falls_back_to_f_linear_outside_fp32_cpu():
    """float64 and autocast take F.linear itself: bit-equal to torch's path."""
    lin, fast = _linear(8, 12, True)
    x = torch.randn(3, 8, dtype=torch.float64)
    assert torch.equal(fast.double()(x), F.linear(x, fast.weight, fast.bias))
    x32 = torch.randn(3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = fast.float()(x32), F.linear(x32, fast.weight, fast.bias)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)


def _model(matmul, seed=0, **model):
    cfg = load_config(overrides=[f"model.{k}={v}" for k, v in dict(
        size="test", d_model=32, n_layers=2, n_heads=4, d_ff=64, seq_len=16, vocab_size=11, dropout=0.1,
        matmul=matmul, **model).items()], pe_type="rope")
    torch.manual_seed(seed)
    return build_model(cfg.model, cfg.pe, "cpu", 0)


def test_model_keeps_parameters_state_dict_and_tied_weights():
    plain, fast = _model("torch"), _model("onednn")
    linears = [m for m in fast.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(type(m) is OneDNNLinear for m in linears)
    assert not any(type(m) is OneDNNLinear for m in plain.modules())
    assert fast.lm_head.weight is fast.tok_emb.weight  # still tied: the same Parameter object
    sd_plain, sd_fast = plain.state_dict(), fast.state_dict()
    assert list(sd_plain) == list(sd_fast) and all(torch.equal(sd_plain[k], sd_fast[k]) for k in sd_plain)
    assert [n for n, _ in plain.named_parameters()] == [n for n, _ in fast.named_parameters()]


def test_training_matches_torch_path_up_to_rounding(monkeypatch):
    """Ten AdamW steps with dropout 0.1 and clipping from the same seed: the oneDNN path draws the same dropout
    masks (it uses no RNG) and its losses and weights stay within float rounding of torch's.

    That the oneDNN kernel really ran is counted at its one call site, not inferred from the numbers differing:
    on some CPUs (an Intel Xeon with AVX-512, at these small shapes) MKL and oneDNN sum in the same order and
    the two runs are bit-equal."""
    calls = []

    def counted(a, b, _mm=matmul_module._mm):
        calls.append(a.shape)
        return _mm(a, b)

    monkeypatch.setattr(matmul_module, "_mm", counted)
    runs = {}
    for matmul in ("torch", "onednn"):
        model = _model(matmul).train()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        torch.manual_seed(123)
        g = torch.Generator().manual_seed(7)
        losses = []
        for _ in range(10):
            x, y = torch.randint(0, 11, (8, 16), generator=g), torch.randint(0, 11, (8, 16), generator=g)
            loss = model(x, y).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        runs[matmul] = losses, model.state_dict(), len(calls)
    (l_t, sd_t, calls_t), (l_o, sd_o, calls_o) = runs["torch"], runs["onednn"]
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in _model("onednn").modules())
    # torch's path never calls oneDNN; the oneDNN path calls it 3 times per layer and step (y, dL/dx, dL/dW)
    assert (calls_t, calls_o) == (0, 10 * 3 * n_linear), (calls_t, calls_o, n_linear)
    torch.testing.assert_close(torch.tensor(l_o), torch.tensor(l_t), rtol=1e-5, atol=0)
    for k in sd_t:
        torch.testing.assert_close(sd_o[k], sd_t[k], rtol=1e-4, atol=1e-6)


def test_unknown_choice_is_refused():
    with pytest.raises(Exception, match="matmul"):
        _model("mkl")


def test_run_identity_ignores_the_choice():
    """Checkpoints are interchangeable between the two settings, so a resume may switch it: the run directory's
    identity (training/rundir.py) is the same, and equal to one made before model.matmul existed."""
    from posbench.config_loader import to_dict
    from posbench.identity_fields import own_entries
    from posbench.model.model_config import ModelConfig
    from posbench.training.rundir import identity

    cfgs = [load_config(overrides=[f"model.matmul={m}"]) for m in ("torch", "onednn")]
    idents = [identity(c, "data") for c in cfgs]
    assert idents[0] == idents[1] and "matmul" not in idents[0]["model"]
    later = ("matmul", "kernels", *(e.name for e in own_entries(ModelConfig)))  # added since, out when default
    before = {k: v for k, v in to_dict(cfgs[0].model).items() if k not in later}
    assert idents[0]["model"] == before


def test_compile_with_onednn_is_refused_before_any_work():
    """inductor cannot lower oneDNN's linear with trainable weights: the config says so instead of a compile
    error at the first step."""
    with pytest.raises(Exception, match="model.matmul=torch with train.compile=true"):
        load_config(overrides=["model.matmul=onednn", "train.compile=true"])
    assert load_config(overrides=["model.matmul=torch", "train.compile=true"]).train.compile


def test_onednn_without_onednn_is_refused(monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)  # a torch built without oneDNN
    with pytest.raises(ConfigError, match="needs a torch built with oneDNN"):
        _model("onednn")
