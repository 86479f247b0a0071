"""Parameter and FLOP accounting from a built model's shapes (the run's own, or one on the meta device).

FLOPs per token for one training step (forward + backward), Kaplan et al. 2020 / PaLM appendix B:
    6 * N_matmul + 12 * n_layers * d_model * seq_len
N_matmul counts every weight used in a matrix multiply: all non-embedding weights plus the LM head
(V x D), which is a real matmul even when its weights are tied to the input embedding (the lookup
itself costs nothing). The second term is the attention scores and weighted sum (QK^T and AV,
2 * 2 * T * D per layer forward, x3 for backward), counted over the full T x T square as PaLM does,
not the causal half. Forward-only FLOPs are a third of each term. A layer with a sliding window W
(model.attention_window, RNoPE-SWA) scores min(W, T) keys per query, so its term is 12 * d_model *
min(W, T): the same convention (a full row per query) over the keys the window lets it see.

Other architectures (model.arch): the attention term is counted once per attention module (the
encoder-decoder's encoder self-, decoder self- and cross-attention alike, over T x T), and is zero for
Mamba, whose selective scan (about 9 * E * d_model * d_state per token and layer) is left out of this
matmul-based estimate. PE parameters are those of every positional-encoding module (the
encoder-decoder has two). A PE's own work beyond these terms (its provider's `layer_flops`, pe/speed.py: PoPE's q.k
over 2K channels, FoPE's frequency mixtures, FoX's gate projection and cumulative sum, CoPE's q . e table products and
its gate cumsum and interpolation over the keys) is added per layer that uses it (`pe.layer_pe(layer)`), over the
keys the layer scores (its sliding window when shorter).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from posbench.model.build import build_model
from posbench.model.model_config import ModelConfig
from posbench.pe import PEConfig


@dataclass
class ModelStats:
    params_total: int  # unique parameters (tied weights once)
    params_embedding: int  # token embedding table
    params_pe: int  # learned PE parameters
    params_matmul: int  # weights used in matmuls per token (incl. the LM head)
    flops_per_token_train: float
    flops_per_token_forward: float
    kernels: list[str]
    windows: list[int | None] = field(default_factory=list)  # per causal self-attention layer; None: full
    flops_pe_train: float = 0.0  # of flops_per_token_train: the PEs' own extra work (layer_flops)
    flops_pe_forward: float = 0.0


def model_stats(cfg: ModelConfig, pe_cfg: PEConfig, device_type: str = "cuda",
                seq_len: int | None = None) -> ModelStats:
    """Stats of a configuration that has no model yet (sweep planning, describe_model): built on meta."""
    with torch.device("meta"):
        model = build_model(cfg, pe_cfg, device_type=device_type)
    return stats_of(model, cfg, seq_len)


def stats_of(model: torch.nn.Module, cfg: ModelConfig, seq_len: int | None = None) -> ModelStats:
    """Stats of a model already built (the training run's own, before it is wrapped or sharded): only
    shapes are read, so the device and the weights' values do not matter."""
    from posbench.model.attention import Attention
    from posbench.model.cross_attention import CrossAttention
    from posbench.pe.encoding import PositionalEncoding

    total = sum(p.numel() for p in model.parameters())
    emb = model.tok_emb.weight.numel()
    pe_params = {id(p): p for m in model.modules() if isinstance(m, PositionalEncoding) for p in m.parameters()}
    pe = sum(p.numel() for p in pe_params.values())
    head = cfg.vocab_size * cfg.d_model
    # norms, attention sinks and SSMax scales (one number per head) scale or add, never multiply a matrix
    matmul = total - emb - pe + head - sum(p.numel() for n, p in model.named_parameters()
                                           if "norm" in n or n.endswith(("attn.sinks", "attn.temperature.s")))
    T = seq_len or cfg.seq_len
    # keys scored per query, per attention module: T, or a layer's sliding window or chunk when shorter
    # (the encoder's self-attention has no causal kernel: kernel None, full rows)
    keys = [min(m.kernel.window or T, m.kernel.chunk or T, T) if isinstance(m, Attention) and m.kernel is not None
            else T
            for m in model.modules() if isinstance(m, (Attention, CrossAttention))]
    attn = 12 * cfg.d_model * sum(keys)
    windows = [m.kernel.window for m in model.modules() if isinstance(m, Attention) and m.kernel is not None]
    extra_fwd = extra_train = 0.0
    pes = [m for m in model.modules() if isinstance(m, PositionalEncoding)]
    nested = {id(sub) for m in pes for sub in m.modules() if sub is not m}  # a hybrid's members count through it
    for pe_module in (m for m in pes if id(m) not in nested):  # the decoder's PE; the encoder-decoder has two
        windowed = pe_module is getattr(model, "pe", None)
        for layer in range(pe_module.ctx.n_layers):  # the PE's own extra work over the keys this layer scores
            T_layer = min(windows[layer] or T, T) if windowed and layer < len(windows) else T
            fwd, train = pe_module.layer_pe(layer).speed.layer_flops(layer, T_layer)
            extra_fwd, extra_train = extra_fwd + fwd, extra_train + train
    return ModelStats(total, emb, pe, matmul, 6 * matmul + attn + extra_train, 2 * matmul + attn / 3 + extra_fwd,
                      list(model.kernel_names), windows, extra_train, extra_fwd)
