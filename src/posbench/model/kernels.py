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
  sdpa_bias    (model/sdpa_bias_kernel.py) the eager kernel under autograd; without it (evaluation, generation)
               SDPA with the bias as a float mask, a block of queries at a time (model/bias_attention.py), or its
               shortcuts from the PE's `fast_bias` (a table by distance, a far field, per-row evaluation): what CPU
               picks for a bias PE
  sdpa_dense   (model/sdpa_bias_kernel.py) sdpa_bias, but training runs SDPA with the layer's whole bias as a float
               mask carrying its gradient: what CUDA picks for a learned bias (T5, KERPLE, FIRE, relative_learned),
               whose FlexAttention backward serialises on atomics (attention_plan.learned_bias)

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

import torch
import torch.nn.functional as F

from posbench.errors import ConfigError
from posbench.model.attention_call import AttentionCall
from posbench.model.attention_plan import auto_kernel_name, static_fast_bias
from posbench.model.attention_sinks import rescale_by_sinks, sdpa_with_sinks
from posbench.model.kernel_base import KERNELS, AttentionKernel, EagerKernel, materialize_bias
from posbench.model.masks import causal_mask, window_mask_mod
from posbench.model.packing import PackingConfig
from posbench.model.sdpa_bias_kernel import BlockedBiasKernel, DenseBiasKernel
from posbench.pe.encoding import PositionalEncoding

# the kernel contract and the eager reference (model/kernel_base.py) and sdpa_bias (model/sdpa_bias_kernel.py) live in
# files of their own; importing them here registers every kernel, and callers find them all in this module
__all__ = ["KERNELS", "AttentionKernel", "BlockedBiasKernel", "DenseBiasKernel", "EagerKernel", "FlashAlibiKernel",
           "FlexKernel", "SDPAKernel", "check_backward", "materialize_bias", "select_kernel"]

@KERNELS.register("sdpa")
class SDPAKernel(AttentionKernel):
    carries_sinks = True
    carries_chunks = True

    @classmethod
    def supports(cls, pe, device_type, attn_dropout, packing=None, backward=False):
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
    def supports(cls, pe, device_type, attn_dropout, packing=None, backward=False):
        if attn_dropout > 0:
            return "FlexAttention has no attention dropout (set model.attn_dropout=0)"
        if pe.has_logits_mod:
            return "the PE rewrites whole rows of the logit matrix (logits_mod); use model.attention=eager"
        if backward and device_type != "cuda":  # torch's flex_attention raises NotImplementedError in backward
            return (f"FlexAttention has no backward pass on {device_type} (PyTorch implements it for CUDA); train "
                    "with model.attention=auto (eager or sdpa_bias on CPU), or on CUDA")
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
    def supports(cls, pe, device_type, attn_dropout, packing=None, backward=False):
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


def check_backward(model: torch.nn.Module, device_type: str, packing: PackingConfig | None = None) -> None:
    """ConfigError unless every attention kernel `model` chose can also run a backward pass on `device_type`
    (`supports(..., backward=True)`): called when a model is built to be trained (model/build.py), before any run
    directory exists; evaluation builds the same model without it (CPU flex is the eager parity reference)."""
    for module in model.modules():
        kernel = getattr(module, "kernel", None)
        if isinstance(kernel, AttentionKernel):
            reason = kernel.supports(kernel.pe, device_type, kernel.attn_dropout, packing, backward=True)
            if reason:
                raise ConfigError(f"model.attention={kernel.name} cannot train PE `{kernel.pe.name}` on "
                                  f"{device_type}: {reason}")


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
                          "sdpa_bias, sdpa_dense or flex")
    built = kernel(pe, device_type, attn_dropout, window)
    built.chunk = chunk
    return built
