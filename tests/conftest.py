import torch

from posbench.config import load_config
from posbench.model.transformer import Transformer

# Per-PE options for the small contract-test model (4 layers so the default hybrid pattern fits).
TEST_PE_OVERRIDES = {
    "fire": ["pe.threshold_init=4"],
    "randomized": ["pe.max_positions=256"],
}


def build_test_model(pe_name: str, seed: int = 0, overrides=(), **model_kw) -> Transformer:
    torch.manual_seed(seed)
    dims = dict(size="test", d_model=32, n_layers=4, n_heads=4, d_ff=64, seq_len=64, vocab_size=61)
    ov = [f"model.{k}={v}" for k, v in {**dims, **model_kw}.items()]
    cfg = load_config(overrides=ov + TEST_PE_OVERRIDES.get(pe_name, []) + list(overrides), pe_type=pe_name)
    return Transformer(cfg.model, cfg.pe)
