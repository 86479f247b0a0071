"""The second layer of the PE contract: speed and accounting, optional, each derived from the meaning by default.

A PE author writes the meaning (pe/encoding.py `HOOKS`: positions, embed, rotate, score_mod, logits_mod, ...). What
kernels may use instead of evaluating that meaning, and what the memory and FLOP estimates charge for it, is a
provider: the PE class names a `PESpeed` subclass (`Speed = ...`, as it names its `Config`), and every PE module
holds one instance of it, `pe.speed`, which model code asks (the layer's PE's: `layer_pe(layer).speed`). The base
provider derives every member from the meaning, so a PE written with the meaning alone is exact, merely slower, and
priced conservatively:

  fast_bias         None: every kernel evaluates `score_mod` itself, the exact bias
  qk_dim            the width `rotate` returns, probed once per head width on one position
  logits_mod_bytes  with a `logits_mod`: `LOGITS_MOD_COPIES` float32 copies of the (B, H, T, S) logit matrix (more
                    than any PE here measured at T = S, scripts/bench_eval_memory.py); 0 without one
  layer_flops       (0, 0): the PE's own work is not counted, so a reported MFU is never overstated

A provider that overrides a member states a faster exact form (pe/fast_bias.py) or a measured price, and is tested
against the meaning (the kernels' parity tests, tests/evaluation/test_eval_memory.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from posbench.pe.fast_bias import FastBias

LOGITS_MOD_COPIES = 16


class PESpeed:
    """Speed and accounting of one PE module (`pe`), by default derived from its meaning (module doc)."""

    def __init__(self, pe):
        self.pe = pe
        self._qk_dims: dict[int, int] = {}

    def fast_bias(self, layer: int, pos_q_T: torch.Tensor, pos_k_S: torch.Tensor) -> FastBias | None:
        """Exact no-grad forms of this call's `score_mod` bias that kernels may use instead of evaluating it (a table
        by distance, a far field, per-row evaluation, ALiBi's slopes: pe/fast_bias.py). None: none; every kernel is
        then exact through `score_mod` alone."""
        return None

    def qk_dim(self, head_dim: int) -> int:
        """Channels of the q and k that `rotate` returns for heads of `head_dim` channels (the values keep head_dim):
        a kernel's memory depends on it (torch's SDPA leaves its fused path when q is wider than v). Derived: rotate
        once on one position, on the PE's own device (the meta device too, where estimates build their model)."""
        if head_dim not in self._qk_dims:
            tensors = itertools.chain(self.pe.parameters(), self.pe.buffers())
            device = next((t.device for t in tensors), torch.device("cpu"))
            x = torch.zeros(1, 1, 1, head_dim, device=device)
            with torch.no_grad():
                q, _ = self.pe.rotate(x, x, torch.zeros(1, device=device))
            self._qk_dims[head_dim] = q.shape[-1]
        return self._qk_dims[head_dim]

    def logits_mod_bytes(self, B: int, H: int, T: int, S: int) -> int:
        """Bytes `logits_mod` holds at once at its peak beyond the (B, H, T, S) matrix it is given, its result
        included, without autograd (model/memory.py). 0 for a PE without one, which allocates nothing."""
        return 4 * B * H * T * S * LOGITS_MOD_COPIES if self.pe.has_logits_mod else 0

    def layer_flops(self, layer: int, seq_len: int) -> tuple[float, float]:
        """(forward, training step) FLOPs per token this PE adds to one layer beyond the model's matmul estimate
        (model/flops.py): wider q.k products (PoPE), frequency mixtures (FoPE), gates and their row sums (FoX,
        CoPE), pairwise work over the `seq_len` keys the layer scores. (0, 0) for a PE whose cost is negligible
        next to attention (a bias lookup, a rotation), and by default."""
        return 0.0, 0.0


@dataclass(frozen=True)
class Member:
    """One row of the contract's second layer: a PESpeed member a provider may override, and its derived default."""

    signature: str
    default: str

    @property
    def name(self) -> str:
        return self.signature.split("(")[0]


SPEED: tuple[Member, ...] = (
    Member("fast_bias(layer, pos_q_T, pos_k_S)", "None: kernels evaluate score_mod"),
    Member("qk_dim(head_dim)", "the width rotate returns"),
    Member("logits_mod_bytes(B, H, T, S)", f"{LOGITS_MOD_COPIES} logit matrices with a logits_mod, else 0"),
    Member("layer_flops(layer, seq_len)", "(0, 0): not counted"),
)
