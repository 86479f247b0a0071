"""PE numbers against independent references: hand-computed values and the published formulas."""

import math

import numpy as np
import pytest
import torch

from posbench.errors import ConfigError
from posbench.pe import PES, PEContext, PositionRangeError
from posbench.pe.alibi import alibi_slopes
from posbench.pe.rope import rope_inv_freq
from posbench.pe.rope_scaling import SCALINGS, ScalingConfig
from posbench.pe.sinusoidal import sinusoidal_table
from posbench.pe.t5 import t5_bucket

CTX = PEContext(d_model=16, n_heads=2, n_layers=2, seq_len=32)


def make(name, **options):
    cls = PES.get(name)
    return PES.build(cls.Config(**options), CTX)


def test_sinusoidal_table_entries():
    t = sinusoidal_table(torch.tensor([0.0, 1.0, 2.0, 100.0]), d_model=4)
    expected = [
        [0.0, 1.0, 0.0, 1.0],
        [math.sin(1), math.cos(1), math.sin(1 / 100), math.cos(1 / 100)],  # 10000^(2/4) = 100
        [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)],
        [math.sin(100), math.cos(100), math.sin(1.0), math.cos(1.0)],
    ]
    torch.testing.assert_close(t, torch.tensor(expected), rtol=1e-6, atol=1e-6)


def test_alibi_slopes_power_of_two():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -k for k in range(1, 9)]))


def test_alibi_slopes_twelve_heads():
    # 8 heads' slopes, then every other slope of 16 heads (2^-0.5, 2^-1.5, ...) for the other 4
    expected = [2.0 ** -k for k in range(1, 9)] + [2.0 ** -(k + 0.5) for k in range(4)]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(expected))


def test_alibi_bias_is_minus_slope_times_distance():
    pe = make("alibi")
    pos = torch.arange(5.0)
    mod = pe.score_mod(0, pos, pos)
    h = torch.tensor(1)
    assert mod(torch.tensor(0.0), 0, h, torch.tensor(4), torch.tensor(1)).item() == pytest.approx(-3 * 2 ** -8)


def _t5_reference(n, num_buckets=32, max_distance=128):
    # T5's scalar rule for the causal case, written independently
    max_exact = num_buckets // 2
    if n < max_exact:
        return n
    v = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    return min(v, num_buckets - 1)


def test_t5_bucket_map():
    hand = {0: 0, 1: 1, 15: 15, 16: 16, 32: 21, 64: 26, 127: 31, 128: 31, 5000: 31}
    got = t5_bucket(torch.tensor(list(hand), dtype=torch.float32), 32, 128).tolist()
    assert got == list(hand.values())
    dists = torch.arange(0, 600)
    assert t5_bucket(dists.float(), 32, 128).tolist() == [_t5_reference(int(n)) for n in dists]


def test_rope_keeps_norms_and_is_relative():
    pe = make("rope")
    q = torch.randn(1, 2, 1, 8)
    k = torch.randn(1, 2, 1, 8)

    def dot(i, j):
        qi, _ = pe.rotate(q, q, torch.tensor([float(i)]))
        _, kj = pe.rotate(k, k, torch.tensor([float(j)]))
        return (qi * kj).sum(-1)

    qr, _ = pe.rotate(q, q, torch.tensor([123.0]))
    torch.testing.assert_close(qr.norm(dim=-1), q.norm(dim=-1))
    torch.testing.assert_close(dot(7, 3), dot(107, 103), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dot(3, 3), dot(50, 50), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(dot(7, 3), dot(7, 5))


def test_rope_inv_freq_formula():
    inv = rope_inv_freq(8, 10000.0)
    torch.testing.assert_close(inv, torch.tensor([1.0, 10000 ** -0.25, 10000 ** -0.5, 10000 ** -0.75]))


def scaled(name, pos_max=10, factor=4.0, original=32, K=16, theta=10000.0, **kw):
    cfg = SCALINGS[name].Config(name=name, factor=factor, original_max_positions=original, **kw)
    inv = rope_inv_freq(K, theta)
    return SCALINGS[name](cfg, train_len=original).transform(inv, torch.arange(float(pos_max)))


def test_pi_divides_frequencies():
    inv, m = scaled("pi")
    torch.testing.assert_close(inv, rope_inv_freq(16, 10000.0) / 4)
    assert m == 1.0


def test_ntk_changes_the_base():
    # NTK-aware: base' = base * s^(d/(d-2)), frequencies recomputed from base'
    inv, _ = scaled("ntk")
    d = 16
    base = 10000.0 * 4.0 ** (d / (d - 2))
    expected = [base ** (-2 * i / d) for i in range(d // 2)]
    torch.testing.assert_close(inv, torch.tensor(expected, dtype=torch.float32), rtol=1e-5, atol=0)


def test_dynamic_ntk_only_past_training_length():
    inv_short, _ = scaled("dynamic", pos_max=32)
    torch.testing.assert_close(inv_short, rope_inv_freq(16, 10000.0))
    inv_long, _ = scaled("dynamic", pos_max=64)  # L = 2 L_train: s' = 4*2 - 3 = 5
    base = 10000.0 * 5.0 ** (16 / 14)
    torch.testing.assert_close(inv_long, torch.tensor([base ** (-2 * i / 16) for i in range(8)]), rtol=1e-5, atol=0)


def test_yarn_paper_matches_paper_formula():
    s, L, d, b, alpha, beta = 4.0, 32, 16, 10000.0, 1.0, 32.0
    inv, mscale = scaled("yarn_paper", factor=s, original=L)
    expected = []
    for i in range(d // 2):
        theta = b ** (-2 * i / d)
        r = L / (2 * math.pi / theta)  # YaRN eq. 17: r(d) = L / lambda_d
        gamma = 0.0 if r < alpha else 1.0 if r > beta else (r - alpha) / (beta - alpha)
        expected.append((1 - gamma) * theta / s + gamma * theta)  # eq. 19
    np.testing.assert_allclose(inv.numpy(), expected, rtol=1e-5)
    assert mscale == pytest.approx(0.1 * math.log(4) + 1)  # eq. 22
    # highest frequency (r = 32/2pi*1 ~ 5.1) is blended; lowest frequencies fully interpolated
    assert inv[-1].item() == pytest.approx(expected[-1])


def test_yarn_matches_the_transformers_formula_worked_by_hand():
    # head_dim 64, theta 10000, original length 1024, factor 4. transformers' find_correction_dim:
    # d(n) = 64 ln(1024 / (2 pi n)) / (2 ln 10000): d(32) = 5.49 -> floor 5, d(1) = 17.70 -> ceil 18.
    # Index i keeps its frequency below 5, is divided by 4 above 18, and blends linearly in i between:
    # ratio_i = 1 - 0.75 * (i - 5) / 13, so index 10: 1 - 0.75 * 5/13 = 0.71154 (the paper form: 0.4475).
    low = math.floor(64 * math.log(1024 / (2 * math.pi * 32)) / (2 * math.log(10000)))
    high = math.ceil(64 * math.log(1024 / (2 * math.pi * 1)) / (2 * math.log(10000)))
    assert (low, high) == (5, 18)
    inv, mscale = scaled("yarn", factor=4.0, original=1024, K=64)
    ratio = (inv / rope_inv_freq(64, 10000.0)).numpy()
    assert ratio[10] == pytest.approx(0.711538, abs=1e-5)
    expected = [1.0 if i <= 5 else 0.25 if i >= 18 else 1 - 0.75 * (i - 5) / 13 for i in range(32)]
    np.testing.assert_allclose(ratio, expected, atol=1e-6)
    assert mscale == pytest.approx(0.1 * math.log(4) + 1)
    paper, _ = scaled("yarn_paper", factor=4.0, original=1024, K=64)
    assert (paper / rope_inv_freq(64, 10000.0))[10].item() == pytest.approx(0.4475, abs=1e-4)


def test_kerple_and_fire_start_where_the_authors_code_starts():
    torch.manual_seed(0)
    ctx = PEContext(d_model=128, n_heads=64, n_layers=1, seq_len=32)  # 64 draws per parameter
    power = PES.build(PES.get("kerple_power").Config(), ctx)
    log = PES.build(PES.get("kerple_log").Config(), ctx)
    # power: multiplier r1 ~ U(0, 1), exponent r2 ~ U(0, 2); log: multiplier ~ U(0, 2), inner ~ U(0, 1)
    assert power.r1_LH.max() <= 1 and power.r2_LH.max() > 1 and power.r2_LH.max() <= 2
    assert log.r1_LH.max() > 1 and log.r2_LH.max() <= 1
    fire = make("fire")
    assert torch.all(fire.c_L == 0.1) and torch.all(fire.threshold_L == 512)


def test_scaling_config_rejects_bad_values():
    with pytest.raises(ConfigError):
        ScalingConfig(name="pi", factor=0.5)
    with pytest.raises(ConfigError, match="did you mean `yarn`"):
        ScalingConfig.registry_lookup("yarm")


def test_rope_scaling_settable_after_construction():
    pe = make("rope")
    before = pe.cos_sin(torch.arange(4.0))[0].clone()
    pe.set_scaling(SCALINGS["pi"].Config(name="pi", factor=2.0))
    after = pe.cos_sin(torch.arange(4.0))[0]
    torch.testing.assert_close(after[2], before[1])  # position 2 at factor 2 == position 1 unscaled


def test_set_scaling_leaves_the_config_as_built():
    """The scaling in effect is the PE's (`scaling_config`); its config keeps what it was built with."""
    pe = make("rope")
    built = pe.cfg.scaling
    pe.set_scaling(SCALINGS["pi"].Config(name="pi", factor=2.0))
    assert pe.cfg.scaling is built and built.name == "none"
    assert pe.scaling_config.name == "pi" and pe.scaling_config.factor == 2.0


def test_prope_zeroes_lowest_frequencies():
    pe = make("prope", kept_frequencies=0.5)
    inv = pe.inv_freq()
    torch.testing.assert_close(inv[:2], rope_inv_freq(8, 10000.0)[:2])
    assert inv[2:].eq(0).all()


def test_xpos_decay():
    pe = make("xpos")
    q = torch.ones(1, 1, 1, 8)
    qr, kr = pe.rotate(q, q, torch.tensor([0.0]))
    torch.testing.assert_close(qr, q)  # position 0: no rotation, scale zeta^0 = 1
    q512, k512 = pe.rotate(q, q, torch.tensor([512.0]))
    # channel pair (0, 4) has zeta_0 = (0 + 0.4) / 1.4; one scale_base (512) of position scales q
    # by zeta_0 and k by 1 / zeta_0, whatever the rotation angle
    pair_norm = lambda x: x[0, 0, 0, [0, 4]].norm().item()
    assert pair_norm(q512) == pytest.approx(math.sqrt(2) * 0.4 / 1.4, rel=1e-5)
    assert pair_norm(k512) == pytest.approx(math.sqrt(2) * 1.4 / 0.4, rel=1e-5)


def test_digit_tables_by_hand():
    pe = make("binary", n_digits=4)
    t = pe.table(torch.tensor([5.0, 10.0]))
    assert t[0, :4].tolist() == [1, 0, 1, 0] and t[1, :4].tolist() == [0, 1, 0, 1]
    assert t[:, 4:].eq(0).all()
    dec = make("decimal", n_digits=3).table(torch.tensor([123.0]))
    assert dec[0, :3].tolist() == [3, 2, 1]
    norm = make("binary_norm", n_digits=4).table(torch.tensor([5.0]))
    torch.testing.assert_close(norm[0, :4], torch.tensor([1.0, -1, 1, -1]) / 2)
    assert make("integer").table(torch.tensor([16.0]))[0].eq(0.5).all()  # 16 / seq_len 32


@pytest.mark.parametrize("name,limit", [("learned", 32), ("sininit", 32), ("binary", 16), ("integer", 32)])
def test_bounded_pes_refuse_longer_inputs(name, limit):
    pe = make(name, **({"n_digits": 4} if name == "binary" else {}))
    assert pe.max_positions == limit
    pe.positions(limit, "cpu")
    with pytest.raises(PositionRangeError, match=f"0..{limit - 1}"):
        pe.positions(limit + 1, "cpu")


def test_sininit_starts_at_sinusoidal():
    pe = make("sininit")
    torch.testing.assert_close(pe.table.weight[:5], sinusoidal_table(torch.arange(5.0), 16))


def test_fixed_wave_tables_scale_to_the_token_embeddings():
    # default: per-channel RMS of the added table equals the embeddings' init std (0.02)
    pe = make("sinusoidal")
    x = torch.zeros(1, 512, 16)
    added = pe.embed(x, torch.arange(512.0))
    assert added.pow(2).mean().sqrt().item() == pytest.approx(0.02, rel=0.02)
    assert make("sinusoidal", scale=1.0).scale == 1.0 and make("binary").scale == 1.0
