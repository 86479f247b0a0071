"""FIRE's no-grad fast path in sdpa_bias (pe/fire_speed.py `piecewise`, `rows_bias`, `invariant_rows`;
model/bias_attention.py `split_blocks`): its MLP as a piecewise-linear function of x against the unrolled MLP
(a float64 reference written here, and `FIRE.bias` itself), and the whole model against the eager kernel with the
threshold inside the window, so queries before it (distance table) and after it (per-row bias) both run.

Tolerance: the piecewise form rounds differently from the unrolled sum (slope x + intercept against 32 relu terms
added one by one), so values agree to float32 rounding of the bias's own scale: atol 1e-5 x (|b2| + sum |w2|
(|w1| + |b1|)), the largest a term of the sum can be at |x| <= 1, rtol 1e-5."""

import functools

import pytest
import torch

from posbench.model import bias_attention
from posbench.model.kernels import KERNELS, EagerKernel, materialize_bias
from posbench.model.masks import causal_mask
from posbench.model.sdpa_bias_kernel import BlockedBiasKernel
from tests.conftest import build_test_model

BOS = 60


@pytest.fixture
def small_blocks(monkeypatch):
    """5 queries per block: a 64-token call runs 13 blocks, one of them across a threshold of 8."""
    monkeypatch.setattr(bias_attention, "BLOCK_ELEMENTS", 1)
    monkeypatch.setattr(bias_attention, "MIN_BLOCK_ROWS", 5)


def fire(threshold=8.0, seed=0, hidden=32, overrides=()):
    model = build_test_model("fire", seed=seed, overrides=[f"pe.threshold_init={threshold}", f"pe.hidden={hidden}",
                                                           *overrides]).eval()
    return model


def awkward(pe, t=0, seed=0):
    """Random weights with what a piecewise form can get wrong: negative w1, w1 = 0 units (constants, one of them
    off: b1 < 0), a breakpoint shared by three units (two rising, one falling), one at x = 0 and breaks inside
    the x range [0, 1] that the queries' x values land on exactly. b2 nonzero."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        w1, b1 = pe.w1_LN[t], pe.b1_LN[t]
        w1.copy_(torch.randn(w1.shape, generator=gen) * 3)
        b1.copy_(torch.randn(b1.shape, generator=gen))
        w1[0], w1[1], b1[0], b1[1] = 0.0, 0.0, 0.7, -0.4  # constant units, on and off
        # three units switching at x = 0.5 (w1 of both signs), one at 0 and one at 1 (x's ends)
        w1[2:5] = torch.tensor([2.0, -4.0, 1.0])
        b1[2:5] = -0.5 * w1[2:5]
        w1[5], b1[5] = 1.5, 0.0
        w1[6], b1[6] = -1.0, 1.0
        pe.w2_LHN[t].copy_(torch.randn(pe.w2_LHN[t].shape, generator=gen))
        pe.b2_LH[t].copy_(torch.randn(pe.b2_LH[t].shape, generator=gen))


def mlp64(pe, t, x):
    """The MLP of FIRE's eq. 6 in float64, written from the formula: (H, *x.shape)."""
    w1, b1 = pe.w1_LN[t].double(), pe.b1_LN[t].double()
    w2, b2 = pe.w2_LHN[t].double(), pe.b2_LH[t].double()
    hidden = torch.relu(x.double()[..., None] * w1 + b1)  # (*x, N)
    return torch.einsum("...n,hn->h...", hidden, w2) + b2.view(-1, *([1] * x.dim()))


def scale(pe, t):
    with torch.no_grad():
        terms_H = (pe.w2_LHN[t].abs() * (pe.w1_LN[t].abs() + pe.b1_LN[t].abs())).sum(-1)
        return float(pe.b2_LH[t].abs().max() + terms_H.max())


def piecewise_at(pe, t, x):
    breaks, slope_HP, intercept_HP = pe.speed.piecewise(t)
    s = torch.bucketize(x, breaks)
    return slope_HP[:, s] * x + intercept_HP[:, s]


def test_the_segments_by_hand():
    """Three units, one head: w1 = (1, -2, 0), b1 = (-0.25, 1, 0.5), w2 = (a, b, c) = (2, 3, 5), b2 = 0.1.
    Unit 0 is on right of 0.25, unit 1 left of 0.5, unit 2 always (relu(0.5) = 0.5). Segments
    (-inf, 0.25]: slope -2b = -6, intercept b2 + b + 0.5c = 5.6;
    (0.25, 0.5]: slope a - 2b = -4, intercept b2 - 0.25a + b + 0.5c = 5.1;
    (0.5, inf): slope a = 2, intercept b2 - 0.25a + 0.5c = 2.1."""
    pe = build_test_model("fire", overrides=["pe.hidden=3"], n_heads=1).pe
    with torch.no_grad():
        pe.w1_LN[0] = torch.tensor([1.0, -2.0, 0.0])
        pe.b1_LN[0] = torch.tensor([-0.25, 1.0, 0.5])
        pe.w2_LHN[0] = torch.tensor([[2.0, 3.0, 5.0]])
        pe.b2_LH[0] = torch.tensor([0.1])
    breaks, slope, intercept = pe.speed.piecewise(0)
    torch.testing.assert_close(breaks, torch.tensor([0.25, 0.5]))
    torch.testing.assert_close(slope, torch.tensor([[-6.0, -4.0, 2.0]]))
    torch.testing.assert_close(intercept, torch.tensor([[5.6, 5.1, 2.1]]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_piecewise_equals_the_mlp_everywhere(seed):
    """Dense x over [-0.5, 1.5] plus every breakpoint exactly and either side of it by one float32 step: the
    piecewise form against the float64 MLP. One segment off (a unit's rank counted on the wrong side) breaks
    values by O(1) of the scale on that segment, far above the tolerance."""
    pe = fire(seed=seed).pe
    awkward(pe, seed=seed)
    breaks, _, _ = pe.speed.piecewise(0)
    assert breaks.numel() == 30 and int((breaks == 0.5).sum()) == 3  # the two constants carry no break
    x = torch.cat((torch.linspace(-0.5, 1.5, 4001), breaks, breaks.nextafter(torch.tensor(-9.0)),
                   breaks.nextafter(torch.tensor(9.0))))
    x = x[x.isfinite()]
    got = piecewise_at(pe, 0, x)
    torch.testing.assert_close(got.double(), mlp64(pe, 0, x), rtol=1e-5, atol=1e-5 * scale(pe, 0))


def test_a_unit_with_a_huge_breakpoint_and_all_units_constant():
    """|w1| tiny: its break lies far outside [0, 1] (or at +-inf in float32); every w1 = 0: no breaks at all, one
    segment, the constant b2 + sum w2 relu(b1)."""
    pe = fire(hidden=4).pe
    with torch.no_grad():
        pe.w1_LN[0] = torch.tensor([1e-39, -1e-30, 1.0, 0.0])
        pe.b1_LN[0] = torch.tensor([0.3, 0.2, -0.5, 0.1])
    x = torch.linspace(0, 1, 101)
    torch.testing.assert_close(piecewise_at(pe, 0, x).double(), mlp64(pe, 0, x), rtol=1e-5, atol=1e-5 * scale(pe, 0))
    with torch.no_grad():
        pe.w1_LN[0] = 0.0
    breaks, slope, _ = pe.speed.piecewise(0)
    assert breaks.numel() == 0 and slope.shape == (4, 1) and (slope == 0).all()
    torch.testing.assert_close(piecewise_at(pe, 0, x).double(), mlp64(pe, 0, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gathered", [True, False])
@pytest.mark.parametrize("positions", ["consecutive", "cached", "spread"])
def test_rows_bias_equals_the_score_mod_per_element(positions, gathered):
    """`rows_bias` blocks (rows last to first) against FIRE.bias on the same grid (materialize_bias of the score_mod)
    for every entry a query may see: 20 queries after 9 cached keys, threshold 8; spread positions (x2) too. With
    the kernel's distance table (`gathered`: sorted rows, runs) and without (a lookup per entry)."""
    pe = fire().pe
    awkward(pe)
    T, S, H = 20, 29 if positions == "cached" else 20, 4
    pos_k = torch.arange(S, dtype=torch.float32) * (2 if positions == "spread" else 1)
    mod = pe.score_mod(0, pos_k[S - T:], pos_k)
    gather = functools.partial(bias_attention.distance_blocks, T=T, S=S, rows=6) if gathered else None
    with torch.no_grad():
        block = pe.speed.fast_bias(0, pos_k[S - T:], pos_k).rows_bias(H, gather)
    allowed = causal_mask(T, S, "cpu")
    for q0, q1, k0, k1, _, _ in bias_attention.block_spans(allowed, 6):
        with torch.no_grad():
            got = block(q0, q1, k0, k1).flip(1)
        with torch.no_grad():
            want = materialize_bias(mod, H, q1 - q0, k1 - k0, "cpu", q0=q0, k0=k0)
        seen = allowed[q0:q1, k0:k1].expand_as(want)
        torch.testing.assert_close(got[seen], want[seen], rtol=1e-5, atol=1e-5 * scale(pe, 0))


def test_invariant_rows_are_those_at_or_before_the_threshold():
    pe = fire(threshold=8.0).pe
    assert pe.speed.invariant_rows(0, torch.arange(64.0)) == 9  # positions 0 .. 8: max(L, i) = L
    assert pe.speed.invariant_rows(0, torch.arange(20.0, 30.0)) == 0
    with torch.no_grad():
        pe.threshold_L.fill_(0.0)  # max(L, i) clamps at 1: positions 0 and 1 share psi(1)
    assert pe.speed.invariant_rows(0, torch.arange(64.0)) == 2


def with_kernel(model, name):
    for layer, block in enumerate(model.blocks):
        block.attn.kernel = KERNELS[name](model.pe.layer_pe(layer), "cpu", 0.0, block.attn.kernel.window)
    return model


@pytest.mark.parametrize("threshold,T", [(8.0, 64), (100.0, 64), (0.0, 64), (8.0, 6)])
def test_logits_equal_the_eager_kernels(threshold, T, small_blocks, monkeypatch):
    """The whole model through sdpa_bias against eager, same weights (the awkward ones in every layer's table):
    threshold inside the window (both paths, blocks across it), beyond it (distance table only), 0 and T < L.
    A spy counts which path served which block."""
    model = fire(threshold=threshold, overrides=["pe.per_layer=true"])
    for t in range(model.pe.n_tables):
        awkward(model.pe, t, seed=t)
    used = {"table": 0, "rows": 0}
    from posbench.model import sdpa_bias_kernel

    def counting(kind, make):
        def wrapped(*args, **kw):
            fn = make(*args, **kw)
            # the kernel's distance reader serves the bias table (4 heads) and FIRE's psi table (1 row)
            name = kind if kind == "rows" or args[0].shape[0] == 4 else "psi"
            return lambda *b: used.__setitem__(name, used.get(name, 0) + 1) or fn(*b)
        return wrapped

    monkeypatch.setattr(sdpa_bias_kernel, "distance_blocks", counting("table", bias_attention.distance_blocks))
    monkeypatch.setattr(model.pe.speed, "rows_bias", counting("rows", model.pe.speed.rows_bias))
    idx = torch.randint(0, BOS, (2, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = with_kernel(model, "eager")(idx).logits
        out = with_kernel(model, "sdpa_bias")(idx).logits
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert used["table"] > 0  # position 0 is always at or before max(L, 1)
    assert (used["rows"] > 0) == (T - 1 > max(threshold, 1.0)) == (used.get("psi", 0) > 0), used


@pytest.mark.parametrize("prompt", [5, 13])
def test_kv_cache_decoding_equals_the_eager_kernels(prompt, small_blocks):
    """A prompt before (5) or across (13) the threshold of 8 through the cache, then one token at a time (T = 1 <
    S, every step past L: rows_bias alone, query offset by the cache)."""
    model = fire(threshold=8.0)
    awkward(model.pe)
    idx = torch.randint(0, BOS, (2, 30), generator=torch.Generator().manual_seed(2))

    def cached(kernel):
        with_kernel(model, kernel)
        cache = model.new_cache()
        with torch.no_grad():
            steps = [model(idx[:, :prompt], cache=cache).logits]
            steps += [model(idx[:, t:t + 1], cache=cache).logits for t in range(prompt, 30)]
        return torch.cat(steps, dim=1)

    torch.testing.assert_close(cached("sdpa_bias"), cached("eager"), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask", ["document", "causal"])
def test_documents_equal_the_eager_kernels(mask, small_blocks):
    """Per-row document positions (model.packing.positions=document), with and without the document mask: the
    kernel's per-row path, as for every bias PE; documents longer than the threshold of 8."""
    model = fire(threshold=8.0, overrides=[f"model.packing.mask={mask}", "model.packing.positions=document",
                                           f"model.packing.bos_id={BOS}"])
    awkward(model.pe)
    idx = torch.randint(0, BOS, (2, 48), generator=torch.Generator().manual_seed(3))
    idx[0, [0, 20]] = BOS
    idx[1, [3, 30]] = BOS
    with torch.no_grad():
        ref = with_kernel(model, "eager")(idx).logits
        out = with_kernel(model, "sdpa_bias")(idx).logits
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_spread_positions_use_rows_bias_for_every_query():
    """Positions that are not consecutive have no distance table: every block comes from rows_bias, = eager."""
    pe = fire(threshold=8.0).pe
    awkward(pe)
    pos = torch.arange(30.0) * 2
    mod, fast = pe.score_mod(0, pos, pos), pe.speed.fast_bias(0, pos, pos)
    assert fast.table(4) is None and fast.rows_bias is not None
    q, k, v = (torch.randn(2, 4, 30, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    with torch.no_grad():
        out = BlockedBiasKernel(pe, "cpu", 0.0)(q, k, v, mod, training=False, fast=fast)
        ref = EagerKernel(pe, "cpu", 0.0)(q, k, v, mod, training=False)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_the_kept_segments_follow_the_weights():
    """`piecewise` keeps its result between calls (decoding asks per layer and step) and remakes it when the
    weights change, in place through an optimizer-like update or through `.data`, which moves no version."""
    pe = fire().pe
    x = torch.linspace(0, 1, 257)
    first = pe.speed.piecewise(0)
    assert pe.speed.piecewise(0) is first
    with torch.no_grad():
        pe.w1_LN[0, 3] += 0.5
    torch.testing.assert_close(piecewise_at(pe, 0, x).double(), mlp64(pe, 0, x), rtol=1e-5, atol=1e-5 * scale(pe, 0))
    pe.w2_LHN.data[0, 1, 2] = -3.0
    torch.testing.assert_close(piecewise_at(pe, 0, x).double(), mlp64(pe, 0, x), rtol=1e-5, atol=1e-5 * scale(pe, 0))


@pytest.mark.parametrize("rows", ["alike", "unlike"])
def test_sorted_rows_equal_the_lookup_per_entry(rows):
    """evaluate_sorted_rows (runs per row, one affine map over the columns all rows share a segment in, a lookup
    where they disagree) against evaluate (a lookup per entry), to the bit, on non-increasing rows: rows nearly
    alike (long shared runs, ragged ends) with x exactly at every break in the same columns (three equal ones
    among them), and rows unlike each other (random ones, one at every break, one constant at the triple break)."""
    from posbench.pe.piecewise_linear import evaluate, evaluate_sorted_rows

    pe = fire().pe
    awkward(pe)
    breaks, slope, intercept = pe.speed.piecewise(0)
    at_breaks = torch.cat((breaks.flip(0), breaks.flip(0)[-1:].expand(270)))  # 300: every break, then the last
    base = torch.linspace(1.2, -0.2, 300)
    if rows == "alike":
        x_RN = torch.stack([base, base - 0.003, base + 0.004, base])
        x_RN = torch.cat((x_RN + float(breaks.max()) + 1.3, at_breaks.expand(4, 300)), dim=1)  # rows non-increasing
    else:
        gen = torch.Generator().manual_seed(4)
        x_RN = torch.stack([torch.rand(300, generator=gen).sort(descending=True).values, at_breaks,
                            torch.full((300,), 0.5), base])
    assert (x_RN[:, 1:] <= x_RN[:, :-1]).all()
    got = evaluate_sorted_rows(-x_RN, breaks, slope, intercept)
    torch.testing.assert_close(got, evaluate(x_RN, breaks, slope, intercept), rtol=0, atol=0)
    torch.testing.assert_close(got.double(), mlp64(pe, 0, x_RN), rtol=1e-5, atol=1e-5 * scale(pe, 0))
