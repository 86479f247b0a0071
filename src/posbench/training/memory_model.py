"""The training-memory model of docs/performance.md, as functions: what one rank holds at the peak of a step.

Layer activations are *counted*, not guessed: one forward of the configuration's blocks (B 1, CPU, bf16 autocast,
SDPA, which like flash and flex attention saves only its output and log-sum-exp, no T x T) under
`torch.autograd.graph.saved_tensors_hooks`, each saved storage once; per layer = (2 layers) - (1 layer) at T0 and
2 T0: the difference is the per-token part, the rest is fixed per layer (autocast's bf16 weight copies). The
count runs the RoPE (SDPA) block: a flex PE's kernel saves the same, a PE's own tensors (FoX's gates) are not in
it. The head + loss is counted from the code:
  plain loss: saved bf16 logits (2V) + their fp32 copy (4V) + fp32 log-softmax (4V) = 10 V bytes per token,
              plus in backward the fp32 gradient of the logits and of their copy (8 V per token, transient);
  chunked:    saved dL/dh (4 D per token) and dL/dW (4 V D, fixed); transient: one (C, V) fp32 block and its
              bf16 copy, and the scaled dL/dW (4 V D) in backward.
State: 16 B/param (fp32 weights and gradients, AdamW m and v) + L x the fixed per-layer part, and under DDP
4 B/param of gradient buckets.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from posbench.config import RunConfig, load_config
from posbench.model.flops import model_stats
from posbench.model.model_config import ModelConfig
from posbench.model.transformer import Transformer


def saved_bytes(model_cfg: ModelConfig, n_layers: int, T: int = 256) -> int:
    """Bytes of storage autograd saves in one bf16-autocast forward of `n_layers` RoPE blocks of `model_cfg`'s
    widths at (1, T) (the vocabulary does not change a layer: 512)."""
    m = copy.deepcopy(model_cfg)
    m.n_layers, m.vocab_size, m.seq_len, m.attention_window = n_layers, 512, max(T, m.seq_len), None
    torch.manual_seed(0)
    model = Transformer(m, load_config(pe_type="rope").pe, loss_chunk_tokens=0)
    seen: dict[int, int] = {}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
        return t

    x = torch.randint(0, 512, (1, T))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype=torch.bfloat16):
        model(x, x)
    return sum(seen.values())


@dataclass(frozen=True)
class LayerBytes:
    per_token: float  # activation bytes saved per token per layer
    fixed: float  # bytes per layer whatever the batch (autocast's bf16 weight copies)


def layer_bytes(model_cfg: ModelConfig, T0: int = 256) -> LayerBytes:
    at = [saved_bytes(model_cfg, 2, t) - saved_bytes(model_cfg, 1, t) for t in (T0, 2 * T0)]
    per_token = (at[1] - at[0]) / T0
    return LayerBytes(per_token, at[0] - per_token * T0)


def head_bytes_per_token(vocab: int, d_model: int, chunk: int) -> int:
    return 10 * vocab if chunk == 0 else 4 * d_model


def transient_bytes(tokens: int, vocab: int, d_model: int, chunk: int) -> int:
    return tokens * vocab * 8 if chunk == 0 else 2 * chunk * vocab * 4 + 2 * vocab * d_model * 4


@dataclass(frozen=True)
class PeakBytes:
    state: float
    activations: float
    transient: float

    @property
    def total(self) -> float:
        return self.state + self.activations + self.transient


def peak_bytes(cfg: RunConfig, micro_batch: int, chunk: int, ddp: bool = False,
               layer: LayerBytes | None = None) -> PeakBytes:
    """What one rank holds at the peak of a training step of `cfg` (no reserve: CUDA context, fragmentation)."""
    m = cfg.model
    layer = layer or layer_bytes(m)
    params = model_stats(m, cfg.pe, "cuda").params_total
    tokens = micro_batch * m.seq_len
    state = (20 if ddp else 16) * params + m.n_layers * layer.fixed
    acts = tokens * (m.n_layers * layer.per_token + head_bytes_per_token(m.vocab_size, m.d_model, chunk))
    return PeakBytes(state, acts, transient_bytes(tokens, m.vocab_size, m.d_model, chunk))
