"""model.dropout_masks=sfc64 (model/dropout_masks.py): masks from numpy's SFC64 seeded from torch's generator,
everything else as torch's dropout: the drop rate p, the kept values (torch's float32 1/(1 - p) scale, compared
with nn.Dropout's own output), the gradient through the same mask, reproducible from torch's seed."""

import pytest
import torch

from posbench.config import load_config
from posbench.model.build import build_model
from posbench.model.dropout_masks import SFC64Dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_is_one_minus_p(p):
    torch.manual_seed(0)
    n = 1_000_003  # odd: the last 64-bit draw is half used
    keep = keep_mask(torch.Size([n]), p)
    assert keep.dtype == torch.bool and keep.shape == (n,)
    sd = (p * (1 - p) / n) ** 0.5
    assert abs(keep.float().mean().item() - (1 - p)) < 5 * sd


def test_kept_values_and_gradient_equal_torch_dropout():
    torch.manual_seed(1)
    x = torch.randn(64, 16, 128) * 3
    ref = torch.nn.Dropout(0.1).train()(x)
    ours_mod = SFC64Dropout(0.1).train()
    x1 = x.clone().requires_grad_()
    ours = ours_mod(x1)
    kept = ours != 0
    both = kept & (ref != 0)
    assert both.sum() > 0.7 * x.numel()
    assert torch.equal(ours[both], ref[both])  # the same float32 scale, the same rounding
    assert torch.equal(ours[~kept], torch.zeros_like(ours[~kept]))
    g = torch.randn_like(x)
    ours.backward(g)
    scale = ref[both][0] / x[both][0]
    assert torch.equal(x1.grad[~kept], torch.zeros_like(x1.grad[~kept]))
    assert torch.allclose(x1.grad[kept], g[kept] * scale, rtol=1e-6, atol=0)


def test_reproducible_from_torch_seed_and_advancing():
    drop = SFC64Dropout(0.3).train()
    x = torch.ones(1000)
    torch.manual_seed(5)
    a, b = drop(x), drop(x)
    torch.manual_seed(5)
    assert torch.equal(drop(x), a) and torch.equal(drop(x), b)
    assert not torch.equal(a, b)  # each call draws a new seed from torch's generator
    torch.manual_seed(6)
    assert not torch.equal(drop(x), a)


def test_eval_mode_and_zero_p_are_identity():
    x = torch.randn(10, 7)
    assert SFC64Dropout(0.5).eval()(x) is x
    assert SFC64Dropout(0.0).train()(x) is x


def test_model_swaps_every_dropout_and_keeps_state():
    def model(masks):
        cfg = load_config(overrides=[f"model.{k}={v}" for k, v in dict(
            size="test", d_model=32, n_layers=2, n_heads=4, d_ff=64, seq_len=16, vocab_size=11, dropout=0.1,
            dropout_masks=masks).items()], pe_type="rope")
        torch.manual_seed(0)
        return build_model(cfg.model, cfg.pe, "cpu", 0)

    plain, fast = model("torch"), model("sfc64")
    drops = [m for m in fast.modules() if isinstance(m, torch.nn.Dropout)]
    assert len(drops) == 5 and all(type(m) is SFC64Dropout and m.p == 0.1 for m in drops)
    assert plain.state_dict().keys() == fast.state_dict().keys()
    assert all(torch.equal(plain.state_dict()[k], fast.state_dict()[k]) for k in plain.state_dict())
    x = torch.randint(0, 11, (4, 16))
    fast.train()
    torch.manual_seed(3)
    l1 = fast(x, x).loss
    torch.manual_seed(3)
    assert torch.equal(fast(x, x).loss, l1)
    fast.eval()
    plain.eval()
    assert torch.equal(fast(x, x).loss, plain(x, x).loss)  # no dropout in eval: the same model
