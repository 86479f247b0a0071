"""The attention kernel contract (`AttentionKernel`), the registry every kernel joins (`KERNELS`), and the eager
reference (`EagerKernel`) every other kernel is tested against and sdpa_bias builds on; model/kernels.py describes the
kernels and their arguments (docs, window, chunk, sinks, forward_bytes) and holds the others.

Shape legend: B batch, H heads, T query length, S key length (S >= T with a KV cache), K head dim.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F

from posbench.model.attention_call import AttentionCall
from posbench.model.attention_sinks import softmax_with_sinks
from posbench.model.masks import causal_mask, chunk_mask
from posbench.model.packing import Documents, PackingConfig
from posbench.pe.encoding import LogitsMod, PositionalEncoding
from posbench.pe.fast_bias import FastBias
from posbench.registry import Registry

KERNELS = Registry("attention kernel")


def materialize_bias(score_mod, H: int, T: int, S: int, device, B: int | None = None,
                     q0: int = 0, k0: int = 0) -> torch.Tensor:
    """Evaluate a FlexAttention score_mod on broadcast index grids: (H, T, S) float32 bias, or (B, H, T, S) with
    `B` (per-row positions, which a score_mod reads at its batch index). `q0`, `k0`: the grids start at query q0
    and key k0 (one block of a longer call, model/bias_attention.py).

    Indices are positions in the q and k tensors; score_mods map them to token positions
    themselves, so a KV cache (T < S) needs nothing special here."""
    if B is not None:
        b = torch.arange(B, device=device)[:, None, None, None]
        h = torch.arange(H, device=device)[None, :, None, None]
        q_idx = torch.arange(q0, q0 + T, device=device)[None, None, :, None]
        kv_idx = torch.arange(k0, k0 + S, device=device)[None, None, None, :]
        zero = torch.zeros((), device=device, dtype=torch.float32)
        return score_mod(zero, b, h, q_idx, kv_idx).expand(B, H, T, S)
    h = torch.arange(H, device=device)[:, None, None]
    q_idx = torch.arange(q0, q0 + T, device=device)[None, :, None]
    kv_idx = torch.arange(k0, k0 + S, device=device)[None, None, :]
    zero = torch.zeros((), device=device, dtype=torch.float32)
    return score_mod(zero, zero, h, q_idx, kv_idx).expand(H, T, S)


class AttentionKernel:
    name: ClassVar[str] = ""
    # takes `sinks_H`, model.attention_sinks' per-head logits (model/attention_sinks.py); Attention refuses the rest
    carries_sinks: ClassVar[bool] = False
    # applies a layer's chunked local attention (model.attention_chunk); select_kernel refuses the rest
    carries_chunks: ClassVar[bool] = False
    # torch.compile(fullgraph=True) holds a model of it in one graph (sdpa_dense makes its bias outside the graph)
    compiles_whole: ClassVar[bool] = True

    def __init__(self, pe: PositionalEncoding, device_type: str, attn_dropout: float, window: int | None = None):
        self.pe = pe
        self.device_type = device_type
        self.attn_dropout = attn_dropout
        self.window = window  # None: full causal attention; W: keys i-W+1 .. i (this kernel's layer)
        self.chunk: int | None = None  # C: keys of the query's own chunk of C (model.attention_chunk; select_kernel)

    def allowed(self, T: int, S: int, device, docs: Documents | None = None) -> torch.Tensor:
        """(T, S) or, with documents, (B, 1, T, S) bool: True where attention is allowed (causal, this layer's
        window and chunk, the query's document)."""
        allowed = causal_mask(T, S, device, self.window) if docs is None else docs.allowed(self.window)
        return allowed if self.chunk is None else allowed & chunk_mask(T, S, device, self.chunk)

    def forward_bytes(self, call: AttentionCall) -> int:
        """Bytes held at once by one call without autograd (module doc). Default: a fused kernel, its output only."""
        return call.out

    @classmethod
    def supports(cls, pe: PositionalEncoding, device_type: str, attn_dropout: float,
                 packing: PackingConfig | None = None, backward: bool = False) -> str | None:
        """None if usable for `pe` on `device_type` with `packing` (model.packing; None: windows are not split),
        else the reason it is not; `backward`: also under autograd (a model built to be trained)."""
        return None

    def __call__(self, q_BHTK, k_BHSK, v_BHSK, score_mod, training: bool, docs: Documents | None = None,
                 fast: FastBias | None = None, sinks_H: torch.Tensor | None = None):
        """Attention of one call: `score_mod` what `attention_bias` made (a score_mod, a LogitsMod or None),
        `fast` the layer PE's `fast_bias` of the call (speed only: a kernel may ignore it), `sinks_H` the layer's
        sink logits (None: no sink; only kernels that carry them get them)."""
        raise NotImplementedError


@KERNELS.register("eager")
class EagerKernel(AttentionKernel):
    carries_sinks = True
    carries_chunks = True

    def scores(self, q_BHTK, k_BHSK, score_mod, docs: Documents | None = None):
        """Pre-softmax logits in float32 with the bias added and future keys (and, with docs.masked, keys of
        other documents) at -inf."""
        T, S = q_BHTK.shape[-2], k_BHSK.shape[-2]
        s_BHTS = (q_BHTK.float() @ k_BHSK.float().transpose(-1, -2)) / math.sqrt(q_BHTK.shape[-1])
        logits_mod = score_mod if isinstance(score_mod, LogitsMod) else None  # CoPE: applied to the masked matrix
        if score_mod is not None and logits_mod is None:
            # per-row positions come with documents; a data-dependent bias (FoX) differs per row anyway
            per_row = docs is not None or self.pe.has_token_features
            B = q_BHTK.shape[0] if per_row else None
            s_BHTS = s_BHTS + materialize_bias(score_mod, q_BHTK.shape[1], T, S, q_BHTK.device, B)
        s_BHTS = s_BHTS.masked_fill(~self.allowed(T, S, q_BHTK.device, docs), float("-inf"))
        return s_BHTS if logits_mod is None else logits_mod(q_BHTK.float(), s_BHTS)

    def forward_bytes(self, call: AttentionCall) -> int:
        E = call.scores
        # the allowed mask: ones, then tril (two at once), and ~allowed beside it while masking; with a chunk the
        # causal mask, the chunk's and their conjunction, as many
        mask = 3 * call.mask
        if self.pe.has_logits_mod:  # the masked matrix handed to the PE, and what its logits_mod holds at its peak
            peak = max(2 * E, E + self.pe.speed.logits_mod_bytes(call.B, call.H, call.T, call.S))
        elif self.pe.has_score_mod:  # materialize_bias: the bias and the (T, S) distance grids its score_mod makes
            bias = (call.B if call.docs or self.pe.has_token_features else 1) * call.H * call.T * call.S * 4
            grid = 2 * bias + 8 * call.T * call.S
            # tempered (model/attention_temperature.py): the bias, its product with the factor and their sum at once
            grid = max(grid, 3 * bias) if call.tempered else grid
            peak = max(E + grid, 2 * E + bias)  # then scores + bias beside both
        else:
            peak = 2 * E  # q k^T and its scaled copy; masked_fill and softmax hold two as well
        if call.sinks:  # softmax_with_sinks: the masked logits, them with the sink's column, and its softmax
            peak = max(peak, 3 * E)
        return peak + mask + call.out

    def __call__(self, q_BHTK, k_BHSK, v_BHSK, score_mod, training, docs=None, fast=None, sinks_H=None):
        s_BHTS = self.scores(q_BHTK, k_BHSK, score_mod, docs)
        p_BHTS = torch.softmax(s_BHTS, dim=-1) if sinks_H is None else softmax_with_sinks(s_BHTS, sinks_H)
        p_BHTS = F.dropout(p_BHTS, self.attn_dropout, training)
        return (p_BHTS @ v_BHSK.float()).to(q_BHTK.dtype)
