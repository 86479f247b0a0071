"""Selective RoPE (Movahedi et al. 2026) against the authors' computation re-derived by hand in float64 loops
(timurcarstensen/selective-rope src/selective_rope/modules/rotary.py): x split into head chunks, each over
sqrt(|x|^2 + 1e-6); phase projection d -> rank -> H*K/2; a causal depthwise convolution of width 4 (weight[3] on
the token itself); the inclusive cumulative sum; angle tau_p Phi with tau_p = 1 / 500000^(2p/K); channel p turned
with p + K/2 by +angle; logits q'.k' / sqrt(K). Zero phases are NoPE bit for bit; eager is its only kernel."""

import math

import torch

from tests.conftest import assert_eager_only, build_test_model
from tests.pe.test_pe_dynamic import layer0_qk, randomized


def logits_by_hand(pe, x_TD, q_HTK, k_HTK):
    """(H, T, T) float64, -inf above the diagonal."""
    H, K = q_HTK.shape[0], q_HTK.shape[-1]
    P, T = K // 2, x_TD.shape[0]
    down, up, conv = (w[0].double() for w in (pe.down_LRD, pe.up_LWR, pe.conv_LWC))
    x = x_TD.double().view(T, H, -1)
    x = (x / (x.square().sum(-1, keepdim=True) + 1e-6).sqrt()).reshape(T, -1)
    pre = [up @ (down @ x[t]) for t in range(T)]
    phase = torch.zeros(T, H * P, dtype=torch.float64)
    total = torch.zeros(H * P, dtype=torch.float64)
    for t in range(T):
        total = total + sum(conv[:, 3 - back] * pre[t - back] for back in range(4) if t - back >= 0)
        phase[t] = total
    tau = torch.tensor([1 / 500000 ** (2 * p / K) for p in range(P)], dtype=torch.float64)
    out = torch.full((H, T, T), float("-inf"), dtype=torch.float64)
    for h in range(H):
        angle = phase[:, h * P:(h + 1) * P] * tau  # (T, P)

        def turned(v, t):
            a0, a1 = v[t, :P].double(), v[t, P:].double()
            c, s = angle[t].cos(), angle[t].sin()
            return torch.cat((a0 * c - a1 * s, a0 * s + a1 * c))

        q_turned = [turned(q_HTK[h], t) for t in range(T)]
        k_turned = [turned(k_HTK[h], t) for t in range(T)]
        for i in range(T):
            for j in range(i + 1):
                out[h, i, j] = q_turned[i] @ k_turned[j] / math.sqrt(K)
    return out


def test_logits_match_the_authors_rotation_by_hand():
    model = randomized("selective_rope")
    assert model.pe.cfg.theta == 500000 and model.pe.cfg.rank == 32 and model.pe.cfg.conv == 4
    idx = torch.randint(0, 61, (1, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = model.attention_scores(idx)[0].double()
        x, q, k = layer0_qk(model, idx)
    torch.testing.assert_close(got[0], logits_by_hand(model.pe, x[0], q[0], k[0]), rtol=1e-5, atol=1e-5)
    plain = (q.double() @ k.double().transpose(-1, -2) / math.sqrt(8)).tril()
    assert (got.tril() - plain).abs().max() > 1e-2  # the rotations do change the logits


def test_zero_phases_are_nope_bit_for_bit_and_only_eager_runs_it():
    model = build_test_model("selective_rope").eval()
    nope = build_test_model("none", attention="eager").eval()
    with torch.no_grad():
        model.pe.up_LWR.zero_()
    nope.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("pe.")})
    idx = torch.randint(0, 61, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(model(idx).logits, nope(idx).logits)
    assert_eager_only(model.pe)
    # the cache keeps each token's phase projection before the convolution: K/2 channels per head
    assert model.pe.token_features(0, torch.randn(2, 5, 32)).shape == (2, 4, 4, 5)
