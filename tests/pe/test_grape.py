"""GRAPE (ICLR 2026) against the authors' computations re-derived by hand in float64 (model-architectures/GRAPE,
model/llama-mha-grape-*.py): GRAPE-M's planes turn by -t f_j (x1 cos + x2 sin, -x1 sin + x2 cos) with f = exp(stored
/ 16) per layer, stored from RoPE's spectrum; the contextual form by -Phi_t f_j with omega_t = sigmoid((w.x_t + b)
/ 16) and Phi_t = sum_{s<t} omega_s; GRAPE-A's key-gated bias -(i - j) softplus(omega_h) m_h softplus(u^.k_j /
sqrt(K)). posbench turns by +angle: negating the second half of every head's q and k rows in W_q, W_k turns our
rotation into theirs (F R(a) F = R(-a) with F = diag(1, -1) on each plane), so the model with those rows negated
must give their logits exactly as they compute them."""

import math

import torch
import torch.nn.functional as F

from posbench.model.kernels import select_kernel
from tests.conftest import assert_eager_only, build_test_model
from tests.pe.test_pe_dynamic import layer0_qk, randomized

H, K, D = 4, 8, 32
P = K // 2


def their_turn(v_K, angle_P):
    """The authors' apply_rotary_emb: (x1 cos + x2 sin, -x1 sin + x2 cos), float64."""
    x1, x2 = v_K[:P].double(), v_K[P:].double()
    c, s = angle_P.cos(), angle_P.sin()
    return torch.cat((x1 * c + x2 * s, -x1 * s + x2 * c))


def their_logits(q_HTK, k_HTK, angle_HTP):
    T = q_HTK.shape[1]
    out = torch.full((H, T, T), float("-inf"), dtype=torch.float64)
    for h in range(H):
        q_turned = [their_turn(q_HTK[h, t], angle_HTP[h, t]) for t in range(T)]
        k_turned = [their_turn(k_HTK[h, t], angle_HTP[h, t]) for t in range(T)]
        for i in range(T):
            for j in range(i + 1):
                out[h, i, j] = q_turned[i] @ k_turned[j] / math.sqrt(K)
    return out


def unrotated_qk(model, idx):
    """Layer 0's queries and keys after QK-norm, before any rotation: (B, H, T, K) each."""
    attn = model.blocks[0].attn
    x = model.blocks[0].attn_norm(model.tok_emb(idx))
    q, k, _ = attn.qkv(x).view(*idx.shape, 3, H, K).permute(2, 0, 3, 1, 4).unbind(0)
    return attn.q_norm(q), attn.k_norm(k)


def flipped_scores(model, idx):
    """Layer 0's logits of `model` with the second half of each head's q and k rows negated (a copy)."""
    with torch.no_grad():
        w = model.blocks[0].attn.qkv.weight
        saved = w.clone()
        for h in range(2 * H):  # q heads, then k heads
            w[h * K + P:(h + 1) * K] *= -1
        got = model.attention_scores(idx)[0].double()
        w.copy_(saved)
    return got


def test_grape_m_turns_each_layers_learned_frequencies_as_the_authors():
    model = build_test_model("grape_m").eval()
    rope = torch.tensor([10000 ** (-2 * j / K) for j in range(P)])
    assert model.pe.cfg.log_freq_scale == 16
    torch.testing.assert_close(model.pe.log_freq_LP.detach(), 16 * rope.log().repeat(4, 1))
    with torch.no_grad():  # each layer its own spectrum, away from RoPE's
        model.pe.log_freq_LP.add_(torch.randn(4, P, generator=torch.Generator().manual_seed(1)) * 8)
    idx = torch.randint(0, 61, (1, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        q, k = unrotated_qk(model, idx)
    f_P = (model.pe.log_freq_LP[0].detach().double() / 16).exp()
    angle = torch.arange(9, dtype=torch.float64)[None, :, None] * f_P
    want = their_logits(q[0], k[0], angle.expand(H, -1, -1))
    torch.testing.assert_close(flipped_scores(model, idx)[0], want, rtol=1e-5, atol=1e-5)
    assert model.pe.layer_pe(1).inv_freq().ne(model.pe.layer_pe(0).inv_freq()).all()
    # no bias: the fused SDPA kernel (flash / memory-efficient on CUDA), as RoPE
    assert {select_kernel("auto", model.pe.layer_pe(0), d).name for d in ("cuda", "cpu")} == {"sdpa"}


def test_grape_m_ctx_turns_by_the_gated_cumulative_phase_as_the_authors():
    model = build_test_model("grape_m_ctx").eval()
    x = torch.randn(1, 3, D)
    omega0 = 1 / (1 + math.exp(-math.log(math.expm1(1e-3)) / 16))  # their init: w = 0, b = softplus^-1(1e-3)
    torch.testing.assert_close(model.pe.token_features(0, x), torch.full((1, H, 3), omega0))
    model = randomized("grape_m_ctx")
    idx = torch.randint(0, 61, (1, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        x, q, k = layer0_qk(model, idx)
    w, b = model.pe.gate_LD[0].detach().double(), model.pe.gate_bias_L[0].item()
    omega = [1 / (1 + math.exp(-(x[0, t].double() @ w + b).item() / 16)) for t in range(9)]
    phi = torch.tensor([sum(omega[:t]) for t in range(9)], dtype=torch.float64)
    angle = phi[None, :, None] * model.pe.log_freq_LP[0].detach().double().exp()
    want = their_logits(q[0], k[0], angle.expand(H, -1, -1))
    torch.testing.assert_close(flipped_scores(model, idx)[0], want, rtol=1e-5, atol=1e-5)
    assert_eager_only(model.pe)


def test_grape_a_adds_the_key_gated_distance_bias_as_the_authors():
    model = build_test_model("grape_a").eval()
    torch.testing.assert_close(F.softplus(model.pe.omega_LH.detach()), torch.ones(4, H))  # omega_init None: 1
    model = randomized("grape_a")
    slopes = [0.25, 0.0625, 0.015625, 0.00390625]  # ALiBi's paper code for 4 heads: 2^(-2 (h + 1))
    idx = torch.randint(0, 61, (1, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = model.attention_scores(idx)[0].double()
        _, q, k = layer0_qk(model, idx)
    want = torch.full((H, 9, 9), float("-inf"), dtype=torch.float64)
    for h in range(H):
        u = model.pe.u_LHK[0, h].detach().double()
        u = u / max(u.norm().item(), 1e-6)
        om = F.softplus(model.pe.omega_LH[0, h].detach().double())
        for i in range(9):
            for j in range(i + 1):
                gate = F.softplus(k[0, h, j].double() @ u / math.sqrt(K))
                want[h, i, j] = q[0, h, i].double() @ k[0, h, j].double() / math.sqrt(K) \
                    - (i - j) * om * slopes[h] * gate
    torch.testing.assert_close(got[0], want, rtol=1e-5, atol=1e-5)
    assert_eager_only(model.pe)


def test_grape_ap_sums_the_edge_potentials_between_key_and_query_as_the_authors():
    model = randomized("grape_ap")
    assert model.pe.cfg.p_dim == 8
    slopes = [0.25, 0.0625, 0.015625, 0.00390625]
    idx = torch.randint(0, 61, (1, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = model.attention_scores(idx)[0].double()
        x, q, k = layer0_qk(model, idx)
    p = (x[0].double() @ model.pe.p_LWD[0].detach().double().t()).view(8, H, 8)  # (T, H, d_p)
    want = torch.full((H, 8, 8), float("-inf"), dtype=torch.float64)
    for h in range(H):
        def psi(t, m):  # their line 179: log sigmoid(p_t . rotary_base1(rms_norm(p_m)) / d_p), times the slope
            pl = p[m, h] / (p[m, h].square().mean() + torch.finfo(torch.float32).eps).sqrt()
            c, s = math.cos(m), math.sin(m)
            turned = torch.cat((pl[:4] * c + pl[4:] * s, -pl[:4] * s + pl[4:] * c))
            return slopes[h] * F.logsigmoid(p[t, h] @ turned / 8)

        for t in range(8):
            for j in range(t + 1):
                want[h, t, j] = q[0, h, t].double() @ k[0, h, j].double() / math.sqrt(K) \
                    + sum(psi(t, m) for m in range(j + 1, t + 1))
    torch.testing.assert_close(got[0], want, rtol=1e-5, atol=1e-5)
    assert_eager_only(model.pe)
