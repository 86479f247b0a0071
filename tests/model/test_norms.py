"""RMSNorm's float32 path (torch's rms_norm) gives the very values and gradients of the formula it replaced,
bit for bit: checked against that formula written out here, on contiguous and strided inputs (QK-norm reads
a permuted view of the qkv projection), in training and under no_grad, and under CPU autocast."""

import pytest
import torch

from posbench.model.norms import RMSNorm


def reference(x, w, eps):
    """The eager formula RMSNorm computed before (and still computes outside float32)."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * w.float()).to(x.dtype)


def _inputs(strided: bool, scale: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    if strided:  # attention's q: (B, H, T, K) view of a (B, T, 3, H, K) projection
        qkv = torch.randn(6, 5, 3 * 4 * 8, generator=g) * scale
        return qkv.view(6, 5, 3, 4, 8).permute(2, 0, 3, 1, 4)[0]
    return torch.randn(6, 5, 24, generator=g) * scale


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 300.0])
def test_float32_path_is_bit_equal_to_the_formula(strided, scale):
    x = _inputs(strided, scale)
    D = x.shape[-1]
    norm = RMSNorm(D, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(D, generator=torch.Generator().manual_seed(1)))
    w_ref = norm.weight.detach().clone().requires_grad_()
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
    y1, y2 = norm(x1), reference(x2, w_ref, 1e-6)
    assert torch.equal(y1, y2)
    y1.backward(grad)
    y2.backward(grad)
    assert torch.equal(x1.grad, x2.grad) and torch.equal(norm.weight.grad, w_ref.grad)
    with torch.no_grad():
        assert torch.equal(norm(x), reference(x, norm.weight, 1e-6))


def test_autocast_and_other_dtypes_keep_the_float32_formula():
    norm = RMSNorm(16)
    x = _inputs(False, 1.0)[..., :16].contiguous()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(norm(x), reference(x, norm.weight, 1e-6))
    xb = x.bfloat16()
    y = norm(xb)
    assert y.dtype == torch.bfloat16 and torch.equal(y, reference(xb, norm.weight, 1e-6))
    xd = x.double()  # computed in float32 as before (x.float()), returned as float64
    assert torch.equal(norm(xd), reference(xd, norm.weight, 1e-6))
