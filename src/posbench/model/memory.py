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
             model.attention_chunk) and, after it, its output and model.attention_gate's (`gate_bytes`); a PE that
             reads its positions from the tokens (`token_positions`, RePo) rotates with per-head tables where RoPE
             shares one (T, K) table: `token_position_floats` more
  MLP        the residual stream before and after attention, the norm (3D) and gate, up, silu(gate) and their
             product (4F)
at `elem` bytes an activation (kernels count their own float32). A PE's carried state (TAPE's) widens the values the
kernel reads and adds its `carry_bytes` to both phases. `kv_cache_bytes`: every layer's keys and values, the state
beside them (greedy decoding's KV cache). The head (logits) is the caller's: evaluation knows how many rows of
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
from posbench.pe.encoding import PositionalEncoding, overrides

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
    mlp = worst = N * (3 * D + 4 * F) * elem  # the MLP
    temperature = build_temperature(cfg.attention_temperature, H, cfg.seq_len)
    gate = gate_bytes(cfg, N, elem)
    carried = state_channels(pe) if pe is not None else 0  # TAPE's state rides beside v
    for layer, (layer_pe, kernel) in enumerate(layer_kernels(cfg, pe, device_type) if pe is not None else []):
        call = AttentionCall(B, H, T, T, K + carried, layer_pe.speed.qk_dim(K), docs=cfg.packing.active,
                             sinks=cfg.attention_sinks, tempered=temperature.applies(layer_pe.position_free))
        after = call.out + gate  # the kernel's temporaries are freed before the gate reads its output
        state = layer_pe.carry_bytes(layer, N)  # the carried state and its update, in attention and the MLP alike
        per_token = 7 * D + 4 * H * call.Q + token_position_floats(layer_pe, H, K)
        worst = max(worst, mlp + state, N * per_token * elem + state + max(kernel.forward_bytes(call), after))
    return worst


def token_position_floats(pe: PositionalEncoding, H: int, K: int) -> int:
    """Floats a token adds to a layer whose PE gives it positions read from its input (`token_positions`): the
    positions (H) and RotaryBase.cos_sin's tables per head, the angles at half and full width, cos, sin and the
    temporary of one of them (4.5 H K at once); 0 for every other PE. The positions' own network runs before the
    rotation, while the rotated q, k and RoPE's temporaries (4 D) do not exist yet, and is narrower (RePo: 4 D / 8)."""
    return H + 9 * H * K // 2 if overrides(type(pe), "token_positions") else 0


def state_channels(pe: PositionalEncoding) -> int:
    """Floats per head and token of the PE's carried state (pe.start_state, TAPE's), which rides beside the values
    through attention and in the KV cache: measured at one position, so no PE declares it; 0 without a state."""
    device = next(pe.parameters(), torch.empty(0)).device
    with torch.no_grad():
        state = pe.start_state(torch.zeros(1, device=device))
    return 0 if state is None else state.shape[-1]


def kv_cache_bytes(cfg: ModelConfig, pe: PositionalEncoding | None, B: int, T: int, elem: int = 4) -> int:
    """Bytes of every layer's keys (the PE's qk_dim wide), values and the PE's cached token features (FoX, CABLE:
    one per head and token; PaTH: its w and beta) for B rows of T tokens (greedy decoding)."""
    if pe is None:
        return 0
    K = cfg.d_model // cfg.n_heads
    total, carried = 0, state_channels(pe)
    for layer in range(cfg.n_layers):
        layer_pe = pe.layer_pe(layer)
        per_head = (layer_pe.speed.qk_dim(K) + K + carried
                    + feature_channels(layer_pe, layer, cfg.d_model, cfg.n_heads))
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
