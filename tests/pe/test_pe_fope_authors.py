"""FoPE against its authors' code (TsinghuaC3I/Fourier-Position-Embedding, olmo/config.py and olmo/model.py
`FourierEmbedding`), re-derived by hand: the coefficients drawn as their `eye_xavier_norm` init (torch's own
xavier_normal_ plus their step identity), used as drawn (`fourier_norm` False), one draw per layer (a
FourierEmbedding in every block); the old behaviour (one set, columns divided by their sums) behind the options."""

import math

import pytest
import torch
import yaml

from posbench.config import load_config
from posbench.config_loader import to_dict
from posbench.errors import CheckpointError
from posbench.evaluation.loading import load_model
from posbench.model.build import build_model
from posbench.pe import PES, PEContext
from posbench.pe.fope import fope_coefficients
from posbench.training import checkpoint as ckpt

# K = 32, L = 1024: D = 9 frequencies 10^(-i/4) turn within 1024 positions, d = min(9, K/4) = 8 slots
CTX = PEContext(d_model=64, n_heads=2, n_layers=3, seq_len=1024)
H, D, d, K = 2, 9, 8, 32


def build(ctx=CTX, seed=0, **options):
    torch.manual_seed(seed)
    return PES.build(PES.get("fope").Config(**options), ctx)


def step_eye(n_in, n_out):
    """The authors' get_step_eye: slot i's 1 at input row i * ceil(D/d), where that row exists."""
    eye = torch.zeros(n_in, n_out)
    step = math.ceil(n_in / n_out)
    for i in range(n_out):
        if i * step < n_in:
            eye[i * step, i] = 1.0
    return eye


def test_defaults_are_the_authors():
    cfg = PES.get("fope").Config()
    assert (cfg.fourier_gain, cfg.fourier_norm, cfg.fourier_shared) == (0.3, False, False)


def test_each_layer_draws_its_own_eye_xavier_norm_coefficients_used_as_drawn():
    pe = build(seed=5)
    assert (pe.n_in, pe.n_out) == (D, d)
    torch.manual_seed(5)  # the same stream: per layer cos then sin, torch's xavier_normal_ over (H, D, d)
    for layer in range(CTX.n_layers):
        for got in (pe.cos_coef[layer], pe.sin_coef[layer]):
            want = torch.nn.init.xavier_normal_(torch.empty(H, D, d), gain=0.3) + step_eye(D, d)
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert (pe.cos_coef.sum(dim=-2) - 1).abs().max() > 1e-2  # columns not normalised
    assert not torch.equal(pe.cos_coef[0], pe.cos_coef[1])  # two layers, two draws


def authors_rotate(t_BHTK, pos, cos_c, sin_c):
    """olmo/model.py FourierEmbedding.apply_rotary_pos_emb with fourier_norm off, written out per channel:
    slot j's cos = sum_i C[h,i,j] cos(w_i n), sin likewise with S; slots d..K/2-1 zero frequency (cos 1, sin 0:
    ours, pe_defaults.md); t * cos + rotate_half(t) * sin."""
    w = [10000 ** (-2 * i / K) for i in range(D)]
    out = t_BHTK.clone()
    for h in range(H):
        for ti, n in enumerate(pos):
            for j in range(K // 2):
                c = sum(cos_c[h, i, j].item() * math.cos(w[i] * n) for i in range(D)) if j < d else 1.0
                s = sum(sin_c[h, i, j].item() * math.sin(w[i] * n) for i in range(D)) if j < d else 0.0
                a, b = t_BHTK[0, h, ti, j].item(), t_BHTK[0, h, ti, j + K // 2].item()
                out[0, h, ti, j], out[0, h, ti, j + K // 2] = a * c - b * s, b * c + a * s
    return out


def test_every_layer_rotates_with_its_own_matrices_by_the_authors_formula():
    pe = build(seed=1)
    q = torch.randn(1, H, 3, K)
    pos = [5.0, 300.0, 1500.0]
    got = [pe.layer_pe(layer).rotate(q, q.clone(), torch.tensor(pos))[0] for layer in range(CTX.n_layers)]
    for layer in range(CTX.n_layers):
        want = authors_rotate(q, pos, pe.cos_coef[layer], pe.sin_coef[layer])
        torch.testing.assert_close(got[layer], want, rtol=1e-5, atol=1e-5)
    assert (got[0] - got[1]).abs().max() > 1e-3


def test_fourier_norm_divides_each_drawn_column_by_its_sum():
    plain, normed = build(seed=2), build(seed=2, fourier_norm=True)
    assert torch.equal(normed.cos_coef, plain.cos_coef / plain.cos_coef.sum(dim=-2, keepdim=True))
    assert torch.equal(normed.sin_coef, plain.sin_coef / plain.sin_coef.sum(dim=-2, keepdim=True))


def test_shared_normalised_set_is_the_formula_before_these_options_bit_for_bit():
    """Before: one (H, D, d) pair for all layers, cos then sin from fope_coefficients, divided by the column
    sums once, buffers `cos_coef`/`sin_coef`."""
    pe = build(seed=3, fourier_shared=True, fourier_norm=True)
    torch.manual_seed(3)
    cos_c, sin_c = fope_coefficients(H, D, d, 0.3), fope_coefficients(H, D, d, 0.3)
    assert torch.equal(pe.cos_coef, cos_c / cos_c.sum(dim=1, keepdim=True))
    assert torch.equal(pe.sin_coef, sin_c / sin_c.sum(dim=1, keepdim=True))
    assert all(pe.layer_pe(layer) is pe for layer in range(CTX.n_layers))


def test_layer_views_hold_nothing_and_the_model_saves_each_set_once():
    cfg = load_config(model_size="nano", overrides=["model.n_layers=3", "pe.name=fope"])
    model = build_model(cfg.model, cfg.pe, "cpu")
    coef_keys = [k for k in model.state_dict() if "coef" in k]
    assert coef_keys == ["pe.cos_coef", "pe.sin_coef"]
    assert model.state_dict()["pe.cos_coef"].shape[0] == 3
    assert all(not list(model.pe.layer_pe(i).parameters()) and not list(model.pe.layer_pe(i).buffers())
               for i in range(3))


def old_checkpoint(tmp_path, config_pe_extra: dict):
    """A FoPE checkpoint as written before the options existed: its config.yaml has no fourier_norm or
    fourier_shared, its model.pt one normalised (H, D, d) set (the shared, normalised layout is that one)."""
    cfg = load_config(model_size="nano", overrides=["model.n_layers=2", "model.seq_len=64", "pe.name=fope",
                                                    "pe.fourier_shared=true", "pe.fourier_norm=true",
                                                    "data.tokenizer.name=bytes"])
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.pe, "cpu").eval()
    raw = to_dict(cfg)
    del raw["pe"]["fourier_norm"], raw["pe"]["fourier_shared"]
    raw["pe"].update(config_pe_extra)
    run = tmp_path / "run"
    run.mkdir()
    ckpt.save(run, 0, model.state_dict(), {}, {"step": 0, "tokens": 0}, yaml.safe_dump(raw))
    return run, model


def test_a_checkpoint_from_before_the_options_is_refused_not_loaded_as_per_layer(tmp_path):
    run, _ = old_checkpoint(tmp_path, {})
    with pytest.raises(CheckpointError, match="pe.cos_coef"):
        load_model(run)


def test_a_checkpoint_from_before_loads_exactly_once_its_config_records_the_old_options(tmp_path):
    run, model = old_checkpoint(tmp_path, {"fourier_shared": True, "fourier_norm": True})
    loaded = load_model(run)
    assert loaded.cfg.pe.fourier_shared and loaded.cfg.pe.fourier_norm
    idx = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(loaded.model(idx).logits, model(idx).logits)
