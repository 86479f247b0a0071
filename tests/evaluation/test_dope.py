"""DoPE (evaluation/dope.py, dope_modes.py): the score from known spectra, the selection order, each mode's q and k
against a hand-built expectation on a 1-layer model, causality, KV cache == no cache, and the refusals."""

import math

import numpy as np
import pytest
import torch

from posbench.config_loader import from_dict
from posbench.errors import ConfigError
from posbench.evaluation.dope import (
    DopeChoice,
    calibration_grams,
    check_dope,
    choose,
    denoised,
    select_heads,
    truncated_entropy_score,
)
from posbench.evaluation.dope_config import DopeConfig
from posbench.evaluation.dope_modes import NOISE_BLOCK
from tests.evaluation.helpers import small_model

K = 8  # head dim of the 1-layer model: d_model 32 / 4 heads


def exp_entropy(p):
    return math.exp(-sum(x * math.log(x) for x in p if x > 0))


def test_score_from_a_known_spectrum_and_its_truncation():
    g = torch.diag(torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=torch.float64))
    assert truncated_entropy_score(g, 32).item() == pytest.approx(exp_entropy([0.4, 0.3, 0.2, 0.1]), rel=1e-12)
    assert truncated_entropy_score(g, 2).item() == pytest.approx(exp_entropy([4 / 7, 3 / 7]), rel=1e-12)
    # basis-free: the same spectrum in a rotated basis, and at any scale, scores the same
    q, _ = torch.linalg.qr(torch.randn(4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    assert truncated_entropy_score(7.0 * q @ g @ q.T, 3).item() == pytest.approx(exp_entropy([4 / 9, 3 / 9, 2 / 9]))
    # an isotropic Gram is full rank (score K), a rank-one one scores 1 (0 log 0 = 0)
    assert truncated_entropy_score(torch.eye(4, dtype=torch.float64), 32).item() == pytest.approx(4.0)
    assert truncated_entropy_score(torch.diag(torch.tensor([5.0, 0, 0, 0], dtype=torch.float64)), 4).item() == 1.0
    # at r = 1 every head scores 1 whatever its spectrum: the tie both versions' r = 1 rows fall into
    batch = torch.stack([g, torch.eye(4, dtype=torch.float64), q @ g @ q.T])
    assert truncated_entropy_score(batch, 1).tolist() == [1.0, 1.0, 1.0]


def test_selection_order_and_ties():
    s = torch.tensor([[3.0, 1.0], [1.0, 2.0]])
    assert select_heads(s, 2, "ascending") == [(0, 1), (1, 0)]  # the tie at 1.0: the lower layer first
    assert select_heads(s, 1, "descending") == [(0, 0)]
    assert select_heads(torch.ones(2, 2), 3, "ascending") == [(0, 0), (0, 1), (1, 0)]
    assert select_heads(torch.ones(2, 2), 3, "descending") == [(0, 0), (0, 1), (1, 0)]


def one_layer(pe="rope", *extra):
    model, cfg = small_model(pe, "model.n_layers=1", *extra, seed=3)
    return model.double(), cfg


def rotated_qk(model, idx):
    """The model's own q and k after the rotation (no edit), from the attention's code."""
    attn = model.blocks[0].attn
    x = model.blocks[0].attn_norm(model.tok_emb(idx))
    pos = model.positions(idx.shape[1], idx.device)
    q, k, _, _ = attn._qkv(x, pos, model.pe, None)
    return q, k


def scores_by_hand(q, k):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    T = q.shape[-2]
    return s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))


def expected_noise(head, T, seed=42, layer=0):
    # block 0's generator, seeded as docs/pe_defaults.md says: SeedSequence([seed, layer, head, block])'s first word
    g = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, layer, head, 0]).generate_state(1)[0]))
    return torch.randn(NOISE_BLOCK, K, generator=g)[:T].double()


@pytest.mark.parametrize("mode", ["gaussian", "all", "parts"])
def test_each_mode_changes_only_the_chosen_heads_as_written(mode):
    model, cfg = one_layer()
    idx = torch.randint(0, 300, (2, 12), generator=torch.Generator().manual_seed(1))
    q, k = rotated_qk(model, idx)
    chosen = [1, 3]
    q_exp, k_exp = q.clone(), k.clone()
    if mode == "gaussian":
        for h in chosen:
            k_exp[:, h] = expected_noise(h, 12)
    elif mode == "all":
        q_exp[:, chosen], k_exp[:, chosen] = 0.0, 0.0
    else:  # the bands of theta_f = 10000^(-2f/K) <= 2 pi / 64 (training length 64) kept, in both halves
        inv = [10000 ** (-2 * f / K) for f in range(K // 2)]
        keep = torch.tensor([float(t <= 2 * math.pi / 64) for t in inv * 2], dtype=torch.float64)
        assert keep.tolist() == [0.0, 0.0, 1.0, 1.0] * 2  # 1, 0.1 rotate too fast; 0.01, 0.001 kept
        q_exp[:, chosen] *= keep
        k_exp[:, chosen] *= keep
    dope = from_dict(DopeConfig, {"mode": {"name": mode}})
    choice = DopeChoice(12, [(0, h) for h in chosen], [[0.0] * 4])
    with denoised(model, choice, dope, cfg.model.seq_len):
        got = model.attention_scores(idx)[0]
    # the eager reference's logits are float32 (model/attention.py `scores`), from float64 q and k here
    torch.testing.assert_close(got, scores_by_hand(q_exp, k_exp).float(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(model.attention_scores(idx)[0], scores_by_hand(q, k).float())  # restored after


def test_an_evaluation_time_scaling_is_undone_after_its_block():
    from posbench.evaluation.scaling import scaled
    from posbench.pe.rope_scaling import SCALINGS

    model, _ = one_layer()
    idx = torch.arange(100)[None] % 300  # past the training length (64): dynamic NTK changes the rotation there
    before = model.attention_scores(idx)[0]
    with scaled(model, SCALINGS.config("dynamic")()):
        assert not torch.allclose(model.attention_scores(idx)[0], before)
    torch.testing.assert_close(model.attention_scores(idx)[0], before, rtol=0, atol=0)
    assert model.pe.scaling_config.name == "none"


def test_calibration_gram_is_the_sum_of_the_rotated_keys_outer_products():
    model, cfg = one_layer()
    rows = torch.randint(0, 300, (3, 10), generator=torch.Generator().manual_seed(2))
    for stage, indicator in (("post_rope", "keys"), ("pre_rope", "queries")):
        dope = from_dict(DopeConfig, {"stage": stage, "indicator": indicator})
        g = calibration_grams(model, rows, dope, batch_size=2)
        attn = model.blocks[0].attn
        x = model.blocks[0].attn_norm(model.tok_emb(rows))
        qkv = attn.qkv(x).view(3, 10, 3, 4, K).permute(2, 0, 3, 1, 4)
        q_in, k_in = attn.q_norm(qkv[0]), attn.k_norm(qkv[1])
        q, k = model.pe.rotate(q_in, k_in, model.positions(10, "cpu"))
        vec = k if indicator == "keys" else q_in
        assert g.shape == (1, 4, K, K)
        torch.testing.assert_close(g[0], torch.einsum("bhtk,bhtj->hkj", vec, vec))


@pytest.mark.parametrize("mode", ["gaussian", "all", "parts"])
def test_choice_depends_on_the_calibration_rows_and_the_forward_stays_causal_with_a_cache(mode):
    model, cfg = small_model("rope", seed=5)
    model = model.double()
    rows = torch.randint(0, 300, (4, 40), generator=torch.Generator().manual_seed(3))
    dope = from_dict(DopeConfig, {"n_heads": 3, "mode": mode})
    choice = choose(model, rows, dope, batch_size=4)
    assert len(choice.heads) == 3 and choice.record()["heads"][0]["score"] == choice.scores_LH[choice.heads[0][0]][
        choice.heads[0][1]]
    assert sorted(choice.scores_LH[l_][h] for l_, h in choice.heads) == sorted(
        s for row in choice.scores_LH for s in row)[:3]  # ascending: the three lowest
    idx = torch.randint(0, 300, (2, 20), generator=torch.Generator().manual_seed(4))
    changed = idx.clone()
    changed[:, 12:] = (changed[:, 12:] + 7) % 300
    with denoised(model, choice, dope, cfg.model.seq_len), torch.no_grad():
        full = model(idx).logits
        torch.testing.assert_close(model(changed).logits[:, :12], full[:, :12])  # the future changes nothing
        cache = model.new_cache()
        # prefill, then one token at a time: each step's keys are the ones the full forward computed
        steps = [model(idx[:, :7], cache=cache).logits] + [model(idx[:, t:t + 1], cache=cache).logits
                                                           for t in range(7, 20)]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-9, atol=1e-9)
    with torch.no_grad():
        assert not torch.allclose(model(idx).logits, full)  # the heads were changed, and are restored after


def test_the_noise_is_a_function_of_layer_head_and_position_alone():
    from posbench.evaluation.dope_modes import GaussianKeys

    eps = GaussianKeys({0: [1]}, 1.0, 42)
    whole = eps.noise(2, 1, torch.arange(0, 3 * NOISE_BLOCK), K)
    # a decode step's positions, across a block boundary, per row, in any order: the same values
    part = torch.tensor([[NOISE_BLOCK - 2, NOISE_BLOCK + 3], [2 * NOISE_BLOCK + 1, 5]])
    torch.testing.assert_close(eps.noise(2, 1, part, K), whole[part])
    assert not torch.allclose(eps.noise(2, 0, part, K), whole[part])  # another head draws its own
    assert not torch.allclose(eps.noise(1, 1, part, K), whole[part])  # another layer too
    assert not torch.allclose(GaussianKeys({}, 1.0, 43).noise(2, 1, part, K), whole[part])  # another seed too


def test_refusals_before_any_work():
    alibi, _ = small_model("alibi")
    with pytest.raises(ConfigError, match="--dope denoises rotary"):
        check_dope(alibi, DopeConfig(), "ckpt")
    rope, _ = small_model("rope")
    with pytest.raises(ConfigError, match="2 layers x 4 heads = 8"):
        check_dope(rope, DopeConfig(n_heads=9), "ckpt")
    check_dope(rope, DopeConfig(n_heads=8), "ckpt")
    xpos, _ = small_model("xpos")
    with pytest.raises(ConfigError, match="dope.mode=parts reads each band"):
        check_dope(xpos, from_dict(DopeConfig, {"mode": "parts"}), "ckpt")
    from posbench.evaluation.eval_config import load_eval_config

    with pytest.raises(ConfigError, match="dope.calibration_seed 7919 is the evaluation's seed"):
        load_eval_config([], [{"suites": ["ppl"], "dope": {}, "seed": 7919}])
    for bad, match in (({"n_heads": 0}, "n_heads"), ({"truncate": 0}, "truncate"), ({"n_calibration": 0}, "n_cal"),
                       ({"order": "up"}, "order"), ({"mode": {"name": "gauss"}}, "gaussian"),
                       ({"mode": {"name": "gaussian", "sigma": 0.0}}, "sigma")):
        with pytest.raises(ConfigError, match=match):
            from_dict(DopeConfig, bad)
