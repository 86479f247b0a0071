"""How long an evaluation context may be, refused before any prompt is built or model run (design rule: bounded).

- MAX_LENGTH = 2**24 = 16,777,216 tokens, for every suite and PE: positions are float32 (pe/encoding.py),
  which holds integers exactly only up to 2**24; past it neighbouring positions round to one, so no PE here
  is defined there (`check_lengths`, on --lengths and each suite's own `lengths`).
- Below it, a length whose forward pass cannot fit the device is refused (`check_fits`, per checkpoint and
  suite when eval.py plans), with the longest length that would fit. `Footprint.need` counts what the run really
  holds: the weights, and one forward of the suite's rows (`Evaluator.forward_rows`) at that length, whose body is
  model/memory.py's estimate (per layer the larger of attention and MLP; attention priced by the layer's kernel
  and PE hooks: CoPE's gates over (T, S), PoPE's unfused scores, a window's or a bias's (T, S) mask, the eager
  kernel's scores), then the head: for a suite that generates (passkey, NIAH: greedy decoding with the KV cache)
  every layer's keys and values beside the prompt's (rows, L, vocabulary) logits, otherwise perplexity's logits of
  at most LOGIT_ELEMENTS entries and their log-softmax; and what the suite keeps beside the forward
  (`Evaluator.held_bytes`: first_token's probabilities of every layer). Held within 1.5x of measured peak RSS on CPU by
  scripts/bench_eval_memory.py (docs/performance.md). The limit is what this process may still allocate
  (posbench/memory_probe.py: the GPU's free memory; on the host the smallest of MemAvailable, RLIMIT_AS/DATA and the
  cgroup's limit), never the physical memory, which a `ulimit -v` or a container's limit may be far below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from posbench.errors import ConfigError, brief
from posbench.memory_probe import available
from posbench.model.memory import forward_bytes, kv_cache_bytes

if TYPE_CHECKING:
    from posbench.model.model_config import ModelConfig
    from posbench.pe.encoding import PositionalEncoding

MAX_LENGTH = 1 << 24
# float32 logits perplexity materialises at once (256 MiB): long windows x big vocabularies (suites/ppl.py's chunk)
LOGIT_ELEMENTS = 1 << 26


def check_lengths(lengths: list[int], where: str) -> None:
    """ConfigError for a length beyond MAX_LENGTH (or below 2 tokens), naming the setting."""
    if any(L < 2 for L in lengths):
        raise ConfigError(f"{where} must be >= 2 tokens, got {brief(lengths)}")
    beyond = [L for L in lengths if L > MAX_LENGTH]
    if beyond:
        raise ConfigError(f"{where}: {max(beyond):,} tokens is beyond the longest context evaluated here, "
                          f"2**24 = {MAX_LENGTH:,} tokens (positions are float32, exact integers only up to 2**24)")


@dataclass(frozen=True)
class Footprint:
    """What evaluating one checkpoint with one suite holds at a length (module doc). `rows(L)`: prompts or windows
    one forward takes at length L; `pe`: the model's (None without attention); `elem`: bytes of an activation."""

    model_cfg: ModelConfig
    pe: PositionalEncoding | None
    device_type: str
    weights: int
    rows: Callable[[int], int]
    generates: bool
    elem: int = 4
    held: Callable[[int], int] = lambda L: 0  # bytes the suite keeps beside the forward (Evaluator.held_bytes)

    def forward(self, L: int) -> int:
        """Bytes one forward of `rows(L)` rows of L tokens holds at its peak, the weights not included."""
        cfg, B = self.model_cfg, self.rows(L)
        body = forward_bytes(cfg, self.pe, self.device_type, B, L, self.elem)
        hidden = B * L * cfg.d_model * self.elem  # the final norm's output, which the head reads
        if self.generates:  # greedy_cached: every layer's keys and values, then beside them the prompt's logits
            cache = kv_cache_bytes(cfg, self.pe, B, L, self.elem)
            return cache + max(body, hidden + B * L * cfg.vocab_size * self.elem)
        # perplexity's token_losses: float32 logits of at most LOGIT_ELEMENTS entries and their log-softmax
        chunk = B * min(L, max(1, LOGIT_ELEMENTS // (B * cfg.vocab_size))) * cfg.vocab_size
        return max(body, hidden + 2 * 4 * chunk + 4 * B * L)

    def need(self, L: int) -> int:
        return self.weights + self.forward(L) + self.held(L)


def check_fits(where: str, lengths: list[int], footprint: Footprint, device: torch.device) -> None:
    """ConfigError naming `where` for the longest of `lengths` that cannot fit what this process may allocate on
    `device` (memory_probe.available: the smallest of its limits): the length, the estimate, the memory and the limit
    that bounds it, and the longest length that fits (module doc)."""
    limit = available(device)
    have = limit.bytes
    over = [L for L in lengths if footprint.need(L) > have]
    if not over:
        return
    L = max(over)
    need = footprint.need(L)
    fits = longest_fit(footprint, have, L)
    advice = f"the longest that fits is {fits:,} tokens" if fits else "no length fits (the weights alone do not)"
    raise ConfigError(f"{where}: a {L:,}-token context needs about {need / 2**30:,.1f} GiB ({footprint.rows(L)} "
                      f"row(s) of one forward pass, weights included; d_model {footprint.model_cfg.d_model}) but "
                      f"{device.type} has {have / 2**30:,.1f} GiB available ({limit.source}); {advice}: choose "
                      "shorter lengths")


def longest_fit(footprint: Footprint, have: int, below: int) -> int:
    """The longest length under `below` whose need fits `have` bytes (bisection: the need grows with the length,
    up to the steps where perplexity's rows per forward drop), or 0 when not even 2 tokens fit."""
    lo, hi = 1, below  # need(lo) fits (lo = 1: nothing yet), need(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if footprint.need(mid) <= have else (lo, mid)
    return lo if lo >= 2 else 0
