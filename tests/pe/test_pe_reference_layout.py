"""The reference framework's PE definitions (`pe.layout=reference`, `model.embed_scale=sqrt_d`), checked
against values written out by hand and a sinusoidal model rebuilt from the paper's formula."""

import math

import pytest
import torch

from posbench.config import CONFIG_DIR, load_config
from posbench.model.build import build_model
from posbench.pe import PES, PEContext


def table(name, d_model, positions, **options):
    cfg = PES.get(name).Config(layout="reference", **options)
    pe = PES.build(cfg, PEContext(d_model=d_model, n_heads=2, n_layers=2, seq_len=64, init_std=0.02))
    return pe.table(torch.tensor(positions, dtype=torch.float32))


def test_binary_most_significant_first_across_all_channels():
    assert table("binary", 8, [7])[0].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    assert table("binary", 8, [0, 1, 200]).tolist() == [[0] * 8, [0] * 7 + [1], [1, 1, 0, 0, 1, 0, 0, 0]]
    assert table("binary_norm", 8, [7])[0].tolist() == [-1, -1, -1, -1, -1, 1, 1, 1]  # no 1/sqrt(n)


def test_decimal_most_significant_first():
    assert table("decimal", 6, [42])[0].tolist() == [0, 0, 0, 0, 4, 2]
    assert table("decimal", 4, [1234, 9])[0].tolist() == [1, 2, 3, 4]
    norm = table("decimal_norm", 6, [42])[0]
    torch.testing.assert_close(norm, torch.tensor([(d - 4.5) / 4.5 for d in [0, 0, 0, 0, 4, 2]]))


def test_wide_models_stay_exact():
    # d_model 512 binary: 512 digit channels; positions below 2**24 fit, the leading 488 are zeros
    t = table("binary", 512, [2**20 + 5])[0]
    assert t[:491].eq(0).all() and t[491].item() == 1 and t[-3:].tolist() == [1, 0, 1]
    assert t.sum().item() == 3


def embedded(cfg, idx_BT):
    """The input of the first block: what embeddings + PE hand the transformer."""
    model = build_model(cfg.model, cfg.pe, "cpu")
    seen = {}
    model.blocks[0].register_forward_pre_hook(lambda mod, args: seen.update(x=args[0]))  # returns None
    model(idx_BT)
    return model, seen["x"]


def test_reference_sinusoidal_model_is_sqrt_d_tokens_plus_the_raw_table():
    cfg = load_config([CONFIG_DIR / "pe" / "reference_sinusoidal.yaml"], model_size="nano")
    idx = torch.randint(0, 512, (2, 10))
    model, x = embedded(cfg, idx)
    d = cfg.model.d_model
    # Vaswani et al. 2017, section 3.5, written out with math.sin / math.cos
    pe = torch.tensor([[math.sin(p / 10000 ** (i / d)) if i % 2 == 0 else math.cos(p / 10000 ** ((i - 1) / d))
                        for i in range(d)] for p in range(10)])
    expected = model.tok_emb.weight[idx] * math.sqrt(d) + pe
    torch.testing.assert_close(x, expected, rtol=1e-5, atol=1e-5)
    # the tied LM head reads the unscaled weight
    assert model.lm_head.weight.data_ptr() == model.tok_emb.weight.data_ptr()


@pytest.mark.parametrize("name", ["binary", "binary_norm", "decimal", "decimal_norm"])
def test_reference_digit_presets(name):
    cfg = load_config([CONFIG_DIR / "pe" / f"reference_{name}.yaml"], model_size="nano")
    assert cfg.pe.name == name and cfg.pe.layout == "reference" and cfg.model.embed_scale == "sqrt_d"
    idx = torch.randint(0, 512, (1, 8))
    model, x = embedded(cfg, idx)
    expected = model.tok_emb.weight[idx] * math.sqrt(cfg.model.d_model) + table(name, cfg.model.d_model, range(8))
    torch.testing.assert_close(x, expected)


def test_defaults_stay_ours():
    cfg = load_config(model_size="nano", pe_type="binary")
    assert cfg.pe.layout == "ours" and cfg.model.embed_scale == "none"
