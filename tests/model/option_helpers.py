"""Shared by the attention-option tests: a seeded nano model with overrides, and how far cached decoding is from
the full forward."""

import torch

from posbench.config import load_config
from posbench.model.build import build_model


def model_with(*overrides):
    """(config, model in eval mode): nano, 2 layers, 64-token windows, seed 0, `overrides` last."""
    cfg = load_config(overrides=["model.n_layers=2", "model.seq_len=64", *overrides], model_size="nano")
    torch.manual_seed(0)
    return cfg, build_model(cfg.model, cfg.pe, "cpu").eval()


def cached_minus_full(model, vocab_size: int) -> float:
    """Largest |logit| difference between an 8-token prompt then 12 one-token steps through the KV cache and one
    full forward of the same 20 tokens (2 rows)."""
    ids = torch.randint(0, vocab_size, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(ids).logits
        cache = model.new_cache()
        steps = [model(ids[:, :8], cache=cache).logits] + [model(ids[:, t:t + 1], cache=cache).logits
                                                           for t in range(8, 20)]
    return (torch.cat(steps, 1) - full).abs().max().item()


def second_document_minus_alone(*overrides) -> float:
    """Max |logits| difference between a 10-token document placed second in a packed row (after a rolled copy of
    itself) and the same document alone, with document masking and positions plus `overrides`."""
    packing = ["model.packing.mask=document", "model.packing.positions=document", "model.packing.bos_id=1"]
    cfg, model = model_with(*overrides, *packing)
    doc = torch.randint(2, cfg.model.vocab_size, (1, 10), generator=torch.Generator().manual_seed(0))
    doc[0, 0] = 1
    row = torch.cat((doc.roll(3, 1).clamp(min=2), doc), dim=1)
    with torch.no_grad():
        return float((model(row).logits[:, 10:] - model(doc).logits).abs().max())
