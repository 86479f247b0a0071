"""Attention kernels, one small class each, chosen once at construction from (device, PE, packing); which kernel
`auto` picks and which path each sdpa_bias call takes are rules in model/attention_plan.py, which the kernels execute.

Shape legend: B batch, H heads, T query length, S key length (S >= T with a KV cache), K head dim.
Causality is bottom-right aligned: query t (of T) sees keys 0 .. S - T + t.

  sdpa         torch SDPA, is_causal; only for PEs without a logit bias
  flex         FlexAttention with the PE's score_mod and a causal block mask (compiled on CUDA)
  flash_alibi  flash-attn's fused ALiBi (alibi_slopes=...), when flash-attn is installed
  eager        explicit softmax; the reference every other kernel is tested against, and what CPU
               training uses when a bias is needed (FlexAttention has no CPU backward); the only kernel
               for a PE with a logits_mod (CoPE), which rewrites whole rows of the logit matrix
  sdpa_bias    the eager kernel under autograd; without it (evaluation, generation) SDPA with the bias as a
               float mask, a block of queries at a time (model/bias_attention.py), or its shortcuts from the PE's
               `fast_bias` (a table by distance, a far field, per-row evaluation): what CPU picks for a bias PE

`docs` (model/packing.py, None unless model.packing splits windows into documents): the batch's documents. With
docs.masked each kernel stops attention at document boundaries: SDPA and eager with a (B, 1, T, S) bool mask,
flex with the batch's BlockMask (built once per batch), flash_alibi with flash-attn's varlen path. Without docs
the plain causal path runs unchanged (`is_causal=True`, no mask tensor).

`window` (model.attention_window and the PE's `layer_window`, merged per layer in model/transformer.py; None: full
attention): a kernel is built for one layer's window, and query i then sees keys i-W+1 .. i only (Mistral's sliding
window, Beltagy et al. 2020). model/masks.py is the one definition of that rule (`Documents.allowed` uses it): SDPA and
eager use them as (T, S) / (B, 1, T, S) bool masks, flex a block mask with the same rule (built once per shape),
flash_alibi flash-attn's `window_size=(W - 1, 0)`. A KV cache keeps every key; the mask hides those that fell out of
the window (decoding equals the full forward).

`forward_bytes(call)`: the bytes a kernel holds at once in one call without autograd, its output included, its
inputs not (model/memory.py sums a layer around it for evaluation's memory check). Counted from each kernel's code
path and held within 1.5x of measured peak RSS by scripts/bench_eval_memory.py (docs/performance.md).
"""

from __future__ import annotations

import functools
import importlib.util
import math
from typing import ClassVar

import torch
import torch.nn.functional as F

from posbench.errors import ConfigError
from posbench.model import bias_attention, far_field
from posbench.model.attention_call import AttentionCall
from posbench.model.attention_plan import (
    BiasCall,
    BiasPath,
    auto_kernel_name,
    bias_kind,
    plan_bias_call,
    static_fast_bias,
)
from posbench.model.attention_sinks import rescale_by_sinks, sdpa_with_sinks, softmax_with_sinks
from posbench.model.bias_attention import (
    block_rows,
    block_spans,
    blocked_bias_attention,
    distance_blocks,
    distance_grid,
    one_block_attention,
    split_blocks,
)
from posbench.model.masks import causal_mask, chunk_mask, window_mask_mod
from posbench.model.packing import Documents, PackingConfig
from posbench.pe.encoding import LogitsMod, PositionalEncoding
from posbench.pe.fast_bias import DistanceTable, FastBias
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
                 packing: PackingConfig | None = None) -> str | None:
        """None if usable for `pe` on `device_type` with `packing` (model.packing; None: windows are not split),
        else the reason it is not."""
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
            peak = max(2 * E, E + self.pe.logits_mod_bytes(call.B, call.H, call.T, call.S))
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


@KERNELS.register("sdpa_bias")
class BlockedBiasKernel(EagerKernel):
    """The eager kernel's result without its (B, H, T, S) tensors: where no autograd graph is recorded, SDPA
    with the bias (the same materialize_bias grid, one block of queries at a time) and the same allowed mask as
    one float mask (model/bias_attention.py). Under autograd, and with attention dropout in training, the eager
    reference runs: SDPA's gradient w.r.t. a float mask is not what CPU training is tested against."""

    def __call__(self, q_BHTK, k_BHSK, v_BHSK, score_mod, training, docs=None, fast=None, sinks_H=None):
        """Executes the path `plan_bias_call` chooses (model/attention_plan.py says when each applies)."""
        H, T, S = q_BHTK.shape[1], q_BHTK.shape[-2], k_BHSK.shape[-2]
        made: list = []  # the distance table, made once and only when a rule or the path asks for it

        def table():
            if not made:  # a list, not functools.cache: dynamo traces this call under torch.compile
                made.append(fast.table(H) if fast is not None and fast.table is not None else None)
            return made[0]

        call = BiasCall(bias_kind(score_mod), torch.is_grad_enabled(), training and self.attn_dropout > 0,
                        docs is not None, self.pe.has_token_features, self.window is not None, q_BHTK.device.type,
                        H, T, S, lambda: table().rows if table() is not None else 0,
                        far_field=fast is not None and fast.far_field is not None,
                        rows_bias=fast is not None and fast.rows_bias is not None,
                        sinks=sinks_H is not None, chunk=self.chunk is not None)
        path = plan_bias_call(call)
        if path is BiasPath.EAGER:
            return super().__call__(q_BHTK, k_BHSK, v_BHSK, score_mod, training, docs, sinks_H=sinks_H)
        return self.PATHS[path](self, q_BHTK, k_BHSK, v_BHSK, score_mod, docs, fast, table())

    def _bias_block(self, score_mod, H: int, device, per_row: int | None):
        """`bias_block` of the score_mod evaluated on each block's grids (per row with `per_row` rows)."""
        return lambda q0, q1, k0, k1: materialize_bias(score_mod, H, q1 - q0, k1 - k0, device, per_row, q0=q0, k0=k0)

    def _documents(self, q, k, v, score_mod, docs, fast, table):
        B, H, T, _ = q.shape
        bias_block = self._bias_block(score_mod, H, q.device, B)  # per-row positions come with documents
        return blocked_bias_attention(q, k, v, bias_block, self.allowed(T, k.shape[-2], q.device, docs))

    def _per_row(self, q, k, v, score_mod, docs, fast, table):
        B, H, T, _ = q.shape
        S = k.shape[-2]
        bias_block = self._bias_block(score_mod, H, q.device, B)  # a data-dependent bias (FoX) differs per row
        return blocked_bias_attention(q, k, v, bias_block, *_causal_blocks(T, S, q.device, self.window,
                                                                           block_rows(T, S, H * B)))

    def _one_block_table(self, q, k, v, score_mod, docs, fast, table: DistanceTable):
        return one_block_attention(q, k, v, distance_grid(table.bias_HS, q.shape[-2], k.shape[-2]))

    def _far_field(self, q, k, v, score_mod, docs, fast, table: DistanceTable):
        # affine in the distance past a near band (ALiBi, T5, relative_learned): no mask over the far keys
        return far_field.far_field_attention(q, k, v, table.bias_HS, fast.far_field(q.shape[1]))

    def _rows_block(self, q, k, fast: FastBias, table: DistanceTable | None):
        """The PE's rows_bias for the queries the table does not serve, joined with the table's rows (FIRE before
        and after its threshold); rows last to first."""
        H, T, S = q.shape[1], q.shape[-2], k.shape[-2]
        rows = block_rows(T, S, H)
        rows_block = fast.rows_bias(H, functools.partial(distance_blocks, T=T, S=S, rows=rows))
        if table is None:
            return rows_block
        return split_blocks(table.rows, distance_blocks(table.bias_HS, T, S, rows), rows_block)

    def _one_block_rows(self, q, k, v, score_mod, docs, fast, table):
        T, S = q.shape[-2], k.shape[-2]
        return one_block_attention(q, k, v, self._rows_block(q, k, fast, table)(0, T, 0, S).flip(1))

    def _blocked_table(self, q, k, v, score_mod, docs, fast, table: DistanceTable):
        H, T, S = q.shape[1], q.shape[-2], k.shape[-2]
        rows = block_rows(T, S, H)
        return blocked_bias_attention(q, k, v, distance_blocks(table.bias_HS, T, S, rows),
                                      *_causal_blocks(T, S, q.device, self.window, rows), rows_reversed=True)

    def _blocked_rows(self, q, k, v, score_mod, docs, fast, table):
        H, T, S = q.shape[1], q.shape[-2], k.shape[-2]
        rows_block = self._rows_block(q, k, fast, table)
        return blocked_bias_attention(q, k, v, rows_block, *_causal_blocks(T, S, q.device, self.window,
                                                                           block_rows(T, S, H)), rows_reversed=True)

    def _blocked(self, q, k, v, score_mod, docs, fast, table):
        H, T, S = q.shape[1], q.shape[-2], k.shape[-2]
        return blocked_bias_attention(q, k, v, self._bias_block(score_mod, H, q.device, None),
                                      *_causal_blocks(T, S, q.device, self.window, block_rows(T, S, H)))

    PATHS = {BiasPath.DOCUMENTS: _documents, BiasPath.PER_ROW: _per_row, BiasPath.ONE_BLOCK_TABLE: _one_block_table,
             BiasPath.FAR_FIELD: _far_field, BiasPath.ONE_BLOCK_ROWS: _one_block_rows,
             BiasPath.BLOCKED_TABLE: _blocked_table, BiasPath.BLOCKED_ROWS: _blocked_rows, BiasPath.BLOCKED: _blocked}

    def forward_bytes(self, call: AttentionCall) -> int:
        """What the planned path holds, planned as a call at consecutive positions (evaluation's): the PE's
        distance table, where it has one, serving every query."""
        pe = self.pe
        fast = None if call.tempered else static_fast_bias(pe)  # a tempered bias comes with no fast form
        bias = "none" if not pe.has_score_mod else "logits" if pe.has_logits_mod else "score"
        has_table = fast is not None and fast.table is not None
        plan = BiasCall(bias, False, False, call.docs, pe.has_token_features, self.window is not None,
                        self.device_type, call.H, call.T, call.S, lambda: call.T if has_table else 0,
                        far_field=fast is not None and fast.far_field is not None,
                        rows_bias=fast is not None and fast.rows_bias is not None,
                        sinks=call.sinks, chunk=self.chunk is not None)
        path = plan_bias_call(plan)
        B, H, T, S, K = call.B, call.H, call.T, call.S, call.K
        if path is BiasPath.EAGER:  # what __call__ hands to the eager kernel
            return super().forward_bytes(call)
        if path in (BiasPath.ONE_BLOCK_TABLE, BiasPath.ONE_BLOCK_ROWS):
            return 3 * 4 * H * T * S + call.out  # one block: its bias, the mask and SDPA's scores, all small
        if path is BiasPath.FAR_FIELD:
            # far_field_attention: q, k, v with one more channel, and per chunk of rows its near band's float mask
            rows = far_field.CHUNK_ROWS
            band = max(fast.far_field(H).start - 1, 0) + rows
            return 4 * B * H * (T + 2 * S) * (K + 1) + 3 * 4 * B * H * rows * band + 2 * call.out
        # blocked SDPA: the (T, S) allowed mask, kept between calls (made as ones then tril/triu: two at once), and
        # per block of about BLOCK_ELEMENTS entries its bias-mask and SDPA's own scores and probabilities
        per_row = B if path in (BiasPath.DOCUMENTS, BiasPath.PER_ROW) else 1
        return 2 * call.mask + 3 * 4 * per_row * bias_attention.BLOCK_ELEMENTS + 2 * call.out


@functools.lru_cache(maxsize=1)
def _causal_blocks(T: int, S: int, device: torch.device, window: int | None, rows: int):
    """`EagerKernel.allowed` without documents (the causal mask, with a layer's window) and its block spans, made
    once per (T, S, window) and shared by every layer and batch (the mask is T x S bools, 64 MiB at 8,192
    tokens, kept until the next shape; remaking it and its spans per layer cost ~15% of a 4,096-token forward)."""
    allowed = causal_mask(T, S, device, window)
    return allowed, block_spans(allowed, rows)


@KERNELS.register("sdpa")
class SDPAKernel(AttentionKernel):
    carries_sinks = True
    carries_chunks = True

    @classmethod
    def supports(cls, pe, device_type, attn_dropout, packing=None):
        return "the PE adds a logit bias (score_mod)" if pe.has_score_mod else None

    def forward_bytes(self, call: AttentionCall) -> int:
        # a bool mask (a window, a chunk, documents, a cache) made as ones then tril/triu (two at once; a chunk's
        # conjunction three); torch's CPU SDPA turns it into a float mask beside it (4 bytes an entry): 5 bytes an
        # entry at once, measured 5.3
        masked = call.docs or self.window is not None or self.chunk is not None or call.T != call.S or call.sinks
        mask = 5 * call.mask if masked else 0
        if call.sinks:
            # sdpa_with_sinks: the float mask broadcast to (H, T, S + 1) with the sink's column, k and v one zero key
            # longer, and SDPA's math path for that mask (its scores and probabilities): measured 3.3 score matrices
            sink_mask = (call.B if call.docs else 1) * 4 * call.H * call.T * (call.S + 1)
            return sink_mask + 2 * call.scores + mask + 2 * 4 * call.B * call.H * (call.S + 1) * call.K + call.out
        if call.Q != call.K:
            # q and k wider than v (PoPE): torch leaves its fused kernels for the math path, which holds the scores
            # and the probabilities, and for is_causal a (T, S) mask made bool then float
            return 2 * call.scores + (mask or 5 * call.T * call.S) + call.out
        return mask + call.out

    def __call__(self, q_BHTK, k_BHSK, v_BHSK, score_mod, training, docs=None, fast=None, sinks_H=None):
        if score_mod is not None:  # SDPA has no place for a bias: running anyway would drop the PE
            raise RuntimeError(f"the sdpa kernel got a score_mod from PE `{self.pe.name}`; select a kernel "
                               "that applies it (model.attention=auto, eager or flex)")
        T, S = q_BHTK.shape[-2], k_BHSK.shape[-2]
        dropout = self.attn_dropout if training else 0.0
        if sinks_H is not None or self.chunk is not None:  # masks the rules below have no form for
            allowed = self.allowed(T, S, q_BHTK.device, docs)
            if sinks_H is None:
                return F.scaled_dot_product_attention(q_BHTK, k_BHSK, v_BHSK, attn_mask=allowed, dropout_p=dropout)
            return sdpa_with_sinks(q_BHTK, k_BHSK, v_BHSK, allowed, sinks_H, dropout)
        if docs is not None and (docs.masked or self.window is not None):
            return F.scaled_dot_product_attention(q_BHTK, k_BHSK, v_BHSK, attn_mask=docs.allowed(self.window),
                                                  dropout_p=dropout)
        if T == S and self.window is None:  # is_causal is top-left aligned, which equals bottom-right only when T == S
            return F.scaled_dot_product_attention(q_BHTK, k_BHSK, v_BHSK, dropout_p=dropout, is_causal=True)
        mask = causal_mask(T, S, q_BHTK.device, self.window)
        return F.scaled_dot_product_attention(q_BHTK, k_BHSK, v_BHSK, attn_mask=mask, dropout_p=dropout)


@functools.lru_cache(maxsize=32)
def _flex_block_mask(T: int, S: int, device: str, window: int | None = None, chunk: int | None = None):
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(window_mask_mod(S - T, window, chunk), None, None, T, S, device=device)


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


@KERNELS.register("flex")
class FlexKernel(AttentionKernel):
    carries_sinks = True
    carries_chunks = True

    @classmethod
    def supports(cls, pe, device_type, attn_dropout, packing=None):
        if attn_dropout > 0:
            return "FlexAttention has no attention dropout (set model.attn_dropout=0)"
        if pe.has_logits_mod:
            return "the PE rewrites whole rows of the logit matrix (logits_mod); use model.attention=eager"
        return None

    def forward_bytes(self, call: AttentionCall) -> int:
        # with sinks, rescale_by_sinks: the log-sum-exps' share and the rescaled output beside the output
        sinks = call.out + 4 * call.B * call.H * call.T if call.sinks else 0
        if self.device_type == "cuda":  # compiled: fused, its output and log-sum-exps
            return call.out + 4 * call.B * call.H * call.T + sinks
        # uncompiled (CPU, the parity reference): flex_attention's eager form builds the scores, the score_mod's and
        # the masked matrix, and the probabilities; not measured (scripts/bench_eval_memory.py has no CPU flex row)
        return 3 * call.scores + call.out + sinks

    def __call__(self, q_BHTK, k_BHSK, v_BHSK, score_mod, training, docs=None, fast=None, sinks_H=None):
        from torch.nn.attention.flex_attention import flex_attention

        T, S = q_BHTK.shape[-2], k_BHSK.shape[-2]
        device = q_BHTK.device
        masked = docs is not None and docs.masked
        block_mask = (docs.block_mask(self.window, self.chunk) if masked
                      else _flex_block_mask(T, S, str(device), self.window, self.chunk))
        # Compiled on CUDA (fused kernel, never a (B,H,T,S) bias); eager elsewhere, which is an
        # unfused reference used for parity tests.
        fn = _compiled_flex() if device.type == "cuda" else flex_attention
        if sinks_H is not None:  # the sink from the log-sum-exp over the real keys (model/attention_sinks.py)
            from torch.nn.attention.flex_attention import AuxRequest

            out_BHTK, aux = fn(q_BHTK, k_BHSK, v_BHSK, score_mod=score_mod, block_mask=block_mask,
                               return_aux=AuxRequest(lse=True))
            return rescale_by_sinks(out_BHTK, aux.lse, sinks_H)
        return fn(q_BHTK, k_BHSK, v_BHSK, score_mod=score_mod, block_mask=block_mask)


@KERNELS.register("flash_alibi")
class FlashAlibiKernel(AttentionKernel):
    @classmethod
    def supports(cls, pe, device_type, attn_dropout, packing=None):
        if packing is not None and packing.mask == "causal" and packing.positions == "document":
            return ("flash-attn's ALiBi takes distances in the window, not per-document positions across documents "
                    "(use model.attention=flex, or model.packing.mask=document)")
        fast = static_fast_bias(pe)
        if fast is None or fast.alibi_slopes is None:
            return "the PE is not ALiBi"
        if not pe.ctx.token_distances:  # flash-attn sees no positions: it would run ALiBi at token distances
            return ("ALiBi's positions are set by a wrapper (pe.name=randomized or coupled), and flash-attn's ALiBi "
                    "applies token distances instead; use model.attention=auto or sdpa_bias")
        if device_type != "cuda":
            return "flash-attn runs on CUDA only"
        if importlib.util.find_spec("flash_attn") is None:
            return "flash-attn is not installed (pip install -e '.[gpu]')"
        return None

    def __call__(self, q_BHTK, k_BHSK, v_BHSK, score_mod, training, docs=None, fast=None, sinks_H=None):
        """`fast`: the ALiBi PE's fast_bias of the call, whose `alibi_slopes` flash-attn applies."""
        if docs is not None and docs.masked:
            return self._varlen(q_BHTK, k_BHSK, v_BHSK, docs, training, fast.alibi_slopes)
        if docs is not None:  # supports() refuses this pairing at construction; called directly, refuse too
            raise ValueError("flash_alibi cannot apply per-document positions without the document mask")
        from flash_attn import flash_attn_func

        out_BTHK = flash_attn_func(
            q_BHTK.transpose(1, 2), k_BHSK.transpose(1, 2), v_BHSK.transpose(1, 2),
            dropout_p=self.attn_dropout if training else 0.0, causal=True,
            alibi_slopes=fast.alibi_slopes.float(), **self._window_size())
        return out_BTHK.transpose(1, 2)

    def _window_size(self) -> dict:
        """flash-attn's `window_size`: query i sees keys i - left .. i + right (bottom-right aligned), so a window
        of W keys is (W - 1, 0); nothing is passed without a window (flash-attn's default, full attention)."""
        return {} if self.window is None else {"window_size": (self.window - 1, 0)}

    def _varlen(self, q_BHTK, k_BHSK, v_BHSK, docs, training, slopes_H):
        """Every document of every row as one sequence of flash-attn's varlen call (ALiBi's bias depends on the
        distance only, which a document's own positions keep). Not exercised by the CPU test suite."""
        from flash_attn import flash_attn_varlen_func

        B, H, T, K = q_BHTK.shape
        if k_BHSK.shape[2] != T:
            raise ValueError("flash_alibi's document-masked path has no KV cache; decode with model.attention=flex")
        doc_BT = docs.doc_q_BT
        # a new sequence wherever the document changes or a row starts
        starts = torch.ones(B, T, dtype=torch.bool, device=doc_BT.device)
        starts[:, 1:] = doc_BT[:, 1:] != doc_BT[:, :-1]
        lengths = torch.diff(torch.cat((starts.flatten().nonzero().flatten(),
                                        torch.tensor([B * T], device=doc_BT.device))))
        cu = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
        flat = lambda x: x.transpose(1, 2).reshape(B * T, H, K)
        out = flash_attn_varlen_func(flat(q_BHTK), flat(k_BHSK), flat(v_BHSK), cu, cu, int(lengths.max()),
                                     int(lengths.max()), dropout_p=self.attn_dropout if training else 0.0,
                                     causal=True, alibi_slopes=slopes_H.float(),
                                     **self._window_size())
        return out.reshape(B, T, H, K).transpose(1, 2)


def select_kernel(requested: str, pe: PositionalEncoding, device_type: str, attn_dropout: float = 0.0,
                  packing: PackingConfig | None = None, window: int | None = None,
                  chunk: int | None = None) -> AttentionKernel:
    """The kernel of one layer; `window`: that layer's sliding window (None: full causal attention); `chunk`: its
    chunked local attention (None: none)."""
    name = auto_kernel_name(pe, device_type) if requested == "auto" else requested
    kernel = KERNELS.get(name)
    reason = kernel.supports(pe, device_type, attn_dropout, packing)
    if reason:
        raise ConfigError(f"model.attention={name} cannot run PE `{pe.name}` on {device_type}: {reason}")
    if chunk is not None and not kernel.carries_chunks:
        raise ConfigError(f"model.attention={name} cannot apply model.attention_chunk; use auto, sdpa, eager, "
                          "sdpa_bias or flex")
    built = kernel(pe, device_type, attn_dropout, window)
    built.chunk = chunk
    return built
