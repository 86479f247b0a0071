"""The KV-cache estimate equals what a prefilled cache holds: keys, values (TAPE's state beside them) and the PE's
cached token features."""

import pytest
import torch

from posbench.model.memory import kv_cache_bytes
from tests.evaluation.helpers import small_model


def held_bytes(cache) -> int:
    tensors = [t for layer in cache.layers for t in (layer.k_BHSK, layer.v_BHSK, layer.feats_BHS) if t is not None]
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("pe", ["rope", "none", "fox", "cable", "path", "stick_breaking", "alibi", "selective_rope",
                                "grape_m_ctx", "grape_ap", "tape", "seqpe"])
def test_the_estimate_is_the_prefilled_cache(pe):
    model, cfg = small_model(pe, seq_len=32)
    B, T = 3, 20
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(0, 256, (B, T)), cache=cache)
    assert kv_cache_bytes(cfg.model, model.pe, B, T) == held_bytes(cache)
