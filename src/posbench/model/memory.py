"""The bytes a no-grad forward pass of the decoder holds at once: what evaluation's memory check
(evaluation/lengths.py) compares with the device before any prompt is built.

Shape legend: B rows, T tokens, D model dim, F the MLP's hidden width, H heads, K head dim, Q the q/k width of a
head (the PE's `qk_dim`), V vocabulary.

Layers run one after another and free their temporaries, so the body's peak is its worst layer, not their sum:
per layer, the larger of
  attention  the residual stream, its norm, qkv (3D), q and k normed and then rotated (4 HQ), RoPE's float
             temporaries (2D), and the larger of the layer's kernel's `forward_bytes` (model/kernels.py: its (T, S)
             scores, masks and a PE's `logits_mod_bytes` where its code path makes them; the call says whether
             model.attention_sinks and model.attention_temperature reach it, and the kernel knows its
             model.attention_chunk) and, after it, its output and model.attention_gate's (`gate_bytes`)
  MLP        the residual stream before and after attention, the norm (3D) and gate, up, silu(gate) and their
             product (4F)
at `elem` bytes an activation (kernels count their own float32). `kv_cache_bytes`: every layer's keys and values
(greedy decoding's KV cache). The head (logits) is the caller's: evaluation knows how many rows of
logits it makes at once. Calibrated against peak RSS by scripts/bench_eval_memory.py (docs/performance.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from posbench.model.attention_call import AttentionCall
from posbench.model.attention_gate import GATES
from posbench.model.attention_temperature import build_temperature
from posbench.model.kernels import AttentionKernel, select_kernel
from posbench.model.transformer import layer_window
from posbench.pe.encoding import PositionalEncoding

if TYPE_CHECKING:
    from posbench.model.model_config import ModelConfig


def layer_kernels(cfg: ModelConfig, pe: PositionalEncoding, device_type: str) -> list[tuple[PositionalEncoding,
                                                                                             AttentionKernel]]:
    """Per layer, its PE and the kernel the model would select on `device_type` (model/transformer.causal_blocks's
    choice, made again: a model inspected on the meta device chose for the CPU)."""
    return [(pe.layer_pe(layer), select_kernel(cfg.attention, pe.layer_pe(layer), device_type, cfg.attn_dropout,
                                               cfg.packing, layer_window(cfg, pe, layer), cfg.layer_chunk(layer)))
            for layer in range(cfg.n_layers)]


def gate_bytes(cfg: ModelConfig, N: int, elem: int) -> int:
    """What model.attention_gate holds beside the kernel's output for N tokens: its projection (G wide: the gate's
    own weights say how wide, read on the meta device), then its sigmoid beside the gated output (D wide).
    0 without a gate."""
    with torch.device("meta"):
        G = sum(lin.out_features for lin in GATES.get(cfg.attention_gate)(cfg.d_model, cfg.n_heads).linears())
    return N * max(2 * G, G + cfg.d_model) * elem if G else 0


def forward_bytes(cfg: ModelConfig, pe: PositionalEncoding | None, device_type: str, B: int, T: int,
                  elem: int = 4) -> int:
    """Bytes the body of a no-grad forward over B rows of T tokens holds at its peak (module doc). `pe` None: a model
    without attention (Mamba), whose layers are counted as the MLP's."""
    D, F, H, K = cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.d_model // cfg.n_heads
    N = B * T
    worst = N * (3 * D + 4 * F) * elem  # the MLP
    temperature = build_temperature(cfg.attention_temperature, H, cfg.seq_len)
    gate = gate_bytes(cfg, N, elem)
    for layer_pe, kernel in (layer_kernels(cfg, pe, device_type) if pe is not None else []):
        call = AttentionCall(B, H, T, T, K, layer_pe.speed.qk_dim(K), docs=cfg.packing.active,
                             sinks=cfg.attention_sinks, tempered=temperature.applies(layer_pe.position_free))
        after = call.out + gate  # the kernel's temporaries are freed before the gate reads its output
        worst = max(worst, N * (7 * D + 4 * H * call.Q) * elem + max(kernel.forward_bytes(call), after))
    return worst


def kv_cache_bytes(cfg: ModelConfig, pe: PositionalEncoding | None, B: int, T: int, elem: int = 4) -> int:
    """Bytes of every layer's keys (the PE's qk_dim wide), values and the PE's cached token features (FoX, CABLE:
    one per head and token; PaTH: its w and beta) for B rows of T tokens (greedy decoding)."""
    if pe is None:
        return 0
    K = cfg.d_model // cfg.n_heads
    total = 0
    for layer in range(cfg.n_layers):
        layer_pe = pe.layer_pe(layer)
        per_head = layer_pe.speed.qk_dim(K) + K + feature_channels(layer_pe, layer, cfg.d_model, cfg.n_heads)
        total += B * T * cfg.n_heads * per_head * elem
    return total


def feature_channels(pe: PositionalEncoding, layer: int, d_model: int, n_heads: int) -> int:
    """Floats per head and token the KV cache keeps for the PE's token features: measured on one zero token, so the
    count is the PE's own (F channels of (B, H, F, T) features, 1 for (B, H, T)) and no PE has to declare it."""
    if not pe.has_token_features:
        return 0
    device = next(pe.parameters(), torch.empty(0)).device  # the estimate may build the model on the meta device
    with torch.no_grad():
        feats = pe.token_features(layer, torch.zeros(1, 1, d_model, device=device))
    return 0 if feats is None else feats.numel() // n_heads
