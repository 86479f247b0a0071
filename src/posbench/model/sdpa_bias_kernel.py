"""The sdpa_bias kernel (`BlockedBiasKernel`): the eager kernel's result without its (B, H, T, S) tensors where no
autograd graph is recorded, executing the path model/attention_plan.py `plan_bias_call` chooses per call: blocked
SDPA with the bias as a float mask (model/bias_attention.py), SDPA once on one block, ALiBi's and T5's far field
(model/far_field.py), or, under autograd, the eager reference it subclasses (model/kernel_base.py; model/kernels.py
describes every kernel and selects them). sdpa_dense (`DenseBiasKernel`) is the same kernel except under autograd,
where it trains through SDPA with the layer's whole bias (CUDA's `auto` for a learned bias,
model/attention_plan.py `learned_bias`).

Shape legend: B batch, H heads, T query length, S key length (S >= T with a KV cache), K head dim.
"""

from __future__ import annotations

import functools
from typing import ClassVar

import torch
import torch.nn.functional as F

from posbench.model import bias_attention, far_field
from posbench.model.attention_call import AttentionCall
from posbench.model.attention_plan import BiasCall, BiasPath, bias_kind, plan_bias_call, static_fast_bias
from posbench.model.bias_attention import (
    block_rows,
    block_spans,
    blocked_bias_attention,
    distance_blocks,
    distance_grid,
    one_block_attention,
    split_blocks,
)
from posbench.model.kernel_base import KERNELS, EagerKernel, materialize_bias
from posbench.model.masks import causal_mask
from posbench.pe.fast_bias import DistanceTable, FastBias


@KERNELS.register("sdpa_bias")
class BlockedBiasKernel(EagerKernel):
    """The eager kernel's result without its (B, H, T, S) tensors: where no autograd graph is recorded, SDPA
    with the bias (the same materialize_bias grid, one block of queries at a time) and the same allowed mask as
    one float mask (model/bias_attention.py). Under autograd, and with attention dropout in training, the eager
    reference runs: SDPA's gradient w.r.t. a float mask is not what CPU training is tested against."""

    dense_grad: ClassVar[bool] = False  # BiasCall.dense_grad: sdpa_dense trains through SDPA (DenseBiasKernel)

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
                        sinks=sinks_H is not None, chunk=self.chunk is not None, dense_grad=self.dense_grad,
                        far_start=lambda: fast.far_field(H).start)
        path = plan_bias_call(call)
        if path is BiasPath.DENSE:
            return self._dense(q_BHTK, k_BHSK, v_BHSK, score_mod, training, docs, table)
        if path is BiasPath.EAGER:
            return super().__call__(q_BHTK, k_BHSK, v_BHSK, score_mod, training, docs, sinks_H=sinks_H)
        return self.PATHS[path](self, q_BHTK, k_BHSK, v_BHSK, score_mod, docs, fast, table())

    def _dense(self, q, k, v, score_mod, training: bool, docs, table):
        """BiasPath.DENSE: the layer's bias made once for the call with its autograd graph (`_dense_bias`), future
        and masked keys at -inf; SDPA then runs a fused kernel with the bias as a float mask (CUDA's memory-efficient
        kernel computes the mask's gradient). `table`: the thunk of the PE's distance table."""
        mask = self._dense_bias(q, k, score_mod, docs, table)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype),
                                              dropout_p=self.attn_dropout if training else 0.0)

    # outside torch.compile's graph: whether the distance table serves the call is a question about the positions'
    # values (BiasPE.by_distance), which a graph cannot hold; the table's gather is then an ordinary index whose
    # backward CUDA runs sorted, where inductor would lower it to atomics into the table's few entries.
    # torch._disable_dynamo is torch.compiler.disable with torch._dynamo imported at the first call rather than
    # here: that import is 2 s of every command's start (`posbench.config` imports the kernels); dynamo skips the
    # wrapper's module, so under compile the call leaves the graph just as a disabled function does
    @torch._disable_dynamo
    def _dense_bias(self, q, k, score_mod, docs, table):
        """(H, T, S) or, per row (documents, token features), (B, H, T, S) float32 with -inf where attention is not
        allowed: from the PE's distance table (the learned function at S distances, then a gather) when it serves
        every query, else its score_mod on the whole grid."""
        B, H, T, _ = q.shape
        S = k.shape[-2]
        per_row = docs is not None or self.pe.has_token_features
        made = None if per_row else table()
        if made is not None and made.rows >= T:
            bias = distance_grid(made.bias_HS, T, S)
        else:
            bias = materialize_bias(score_mod, H, T, S, q.device, B if per_row else None)
        return bias.masked_fill(~self.allowed(T, S, q.device, docs), float("-inf"))

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
                        sinks=call.sinks, chunk=self.chunk is not None,
                        far_start=lambda: fast.far_field(call.H).start)
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


@KERNELS.register("sdpa_dense")
class DenseBiasKernel(BlockedBiasKernel):
    """sdpa_bias whose training calls run SDPA with the whole bias as a float mask that carries its gradient
    (BiasPath.DENSE) instead of the eager reference: no (B, H, T, S) scores or probabilities are kept, only the
    (H, T, S) bias and its gradient, per row with documents. Without autograd it is sdpa_bias (the same plan).
    Why it exists: a learned score_mod's FlexAttention backward (model/attention_plan.py `learned_bias`)."""

    dense_grad = True
    compiles_whole = False  # its bias is made outside torch.compile's graph (`_dense_bias`)


@functools.lru_cache(maxsize=1)
def _causal_blocks(T: int, S: int, device: torch.device, window: int | None, rows: int):
    """`EagerKernel.allowed` without documents (the causal mask, with a layer's window) and its block spans, made
    once per (T, S, window) and shared by every layer and batch (the mask is T x S bools, 64 MiB at 8,192
    tokens, kept until the next shape; remaking it and its spans per layer cost ~15% of a 4,096-token forward)."""
    allowed = causal_mask(T, S, device, window)
    return allowed, block_spans(allowed, rows)
