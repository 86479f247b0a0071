"""Mamba: mambapy's parallel scan equals a sequential reference written here, cached stepping equals the
full forward, the model is causal, and it takes no positional encoding."""

import pytest
import torch

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.evaluation.generate import greedy_cached, greedy_recompute
from posbench.model.build import build_model
from posbench.training.optim import param_groups


def mamba(**extra):
    overrides = ["model.d_model=16", "model.n_layers=2", "model.n_heads=2", "model.vocab_size=20", "model.seq_len=32",
                 "pe.name=none", "model.arch.name=mamba", "model.arch.d_state=4",
                 *[f"{k}={v}" for k, v in extra.items()]]
    cfg = load_config(overrides=overrides)
    torch.manual_seed(0)
    return build_model(cfg.model, cfg.pe).eval()


def reference_scan(x, delta, A, B, C, D):
    """The selective SSM recurrence of Gu & Dao (2023), eq. 2a-2b with the zero-order hold of A and the
    Euler step for B (their Algorithm 2), one time step at a time, in float64:
        h_t = exp(delta_t A) h_{t-1} + delta_t B_t x_t,   y_t = C_t . h_t + D x_t."""
    x, delta, A, B, C, D = (t.double() for t in (x, delta, A, B, C, D))
    Bsz, L, ED = x.shape
    h = torch.zeros(Bsz, ED, A.shape[1], dtype=torch.float64)
    ys = []
    for t in range(L):
        h = torch.exp(delta[:, t, :, None] * A) * h + delta[:, t, :, None] * B[:, t, None, :] * x[:, t, :, None]
        ys.append((h * C[:, t, None, :]).sum(-1) + D * x[:, t])
    return torch.stack(ys, 1)


@pytest.mark.parametrize("L", [1, 7, 16, 37])  # powers of two and not (pscan pads to the next one)
def test_parallel_scan_equals_sequential_reference(L):
    block = mamba().mamba.layers[0].mixer
    g = torch.Generator().manual_seed(L)
    ED, N = block.config.d_inner, block.config.d_state
    x = torch.randn(3, L, ED, generator=g)
    delta = torch.nn.functional.softplus(torch.randn(3, L, ED, generator=g))
    A = -torch.exp(torch.randn(ED, N, generator=g))
    B, C = torch.randn(3, L, N, generator=g), torch.randn(3, L, N, generator=g)
    D = torch.randn(ED, generator=g)
    ours = block.selective_scan(x, delta, A, B, C, D)  # mambapy's parallel scan (pscan)
    torch.testing.assert_close(ours.double(), reference_scan(x, delta, A, B, C, D), atol=1e-4, rtol=1e-4)


def test_cached_stepping_equals_full_forward():
    model = mamba()
    idx = torch.randint(0, 20, (2, 13), generator=torch.Generator().manual_seed(3))
    full = model(idx).logits
    cache = model.new_cache()
    prompt = model(idx[:, :5], cache=cache).logits  # a prompt through the cache, then one token per call
    steps = [model(idx[:, t:t + 1], cache=cache).logits for t in range(5, 13)]
    torch.testing.assert_close(torch.cat([prompt, *steps], 1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == 13
    assert torch.equal(greedy_cached(model, idx[:, :4], 6), greedy_recompute(model, idx[:, :4], 6))


def test_causal():
    model = mamba()
    idx = torch.randint(0, 20, (1, 12), generator=torch.Generator().manual_seed(4))
    changed = idx.clone()
    changed[0, 8] = (idx[0, 8] + 1) % 20
    a, b = model(idx).logits, model(changed).logits
    torch.testing.assert_close(a[:, :8], b[:, :8])
    assert not torch.allclose(a[:, 8:], b[:, 8:])


def test_refuses_a_positional_encoding_and_keeps_A_and_D_out_of_weight_decay():
    with pytest.raises(ConfigError, match="pe.name=none"):
        load_config(overrides=["model.arch.name=mamba", "pe.name=rope"])
    model = mamba()
    no_decay = {id(p) for p in param_groups(model, 0.1)[1]["params"]}
    mixer = model.mamba.layers[0].mixer
    assert id(mixer.A_log) in no_decay and id(mixer.D) in no_decay  # A_log is a matrix, still not decayed
    assert id(mixer.in_proj.weight) not in no_decay


def test_per_token_losses_for_perplexity_equal_the_forward_logits():
    from posbench.evaluation.suites.ppl import token_losses

    model = mamba()
    g = torch.Generator().manual_seed(5)
    x, y = torch.randint(0, 20, (2, 17), generator=g), torch.randint(0, 20, (2, 17), generator=g)
    logits = model(x).logits
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(2, 17)
    torch.testing.assert_close(token_losses(model, x, y), expected)
