"""How long an evaluation context may be, refused before any prompt is built or model run (DESIGN.md, style 21).

- MAX_LENGTH = 2**24 = 16,777,216 tokens, for every suite and PE: positions are float32 (pe/encoding.py),
  which holds integers exactly only up to 2**24; past it neighbouring positions round to one, so no PE here
  is defined there (`check_lengths`, on --lengths and each suite's own `lengths`).
- Below it, a length whose forward pass cannot fit the device is refused (`check_fits`, per checkpoint and
  suite when eval.py plans): `forward_floor_bytes` is a lower bound, not an estimate of the peak: the
  residual stream and one layer's q, k and v for L tokens of one prompt, plus the (heads, L, L) attention
  scores when the attention kernel materialises them (model.attention=eager; CPU's own choice for a bias PE,
  sdpa_bias, evaluates a block of queries at a time and does not), plus, for a
  suite that generates (passkey, NIAH: greedy decoding with the KV cache), every layer's keys and values and
  the prompt's (L, vocabulary) logits. A length refused here would have ended in a MemoryError after its
  prompts were built; one allowed may still need more than the floor.
"""

from __future__ import annotations

import os

import torch

from posbench.config_loader import ConfigError
from posbench.errors import brief

MAX_LENGTH = 1 << 24


def check_lengths(lengths: list[int], where: str) -> None:
    """ConfigError for a length beyond MAX_LENGTH (or below 2 tokens), naming the setting."""
    if any(L < 2 for L in lengths):
        raise ConfigError(f"{where} must be >= 2 tokens, got {brief(lengths)}")
    beyond = [L for L in lengths if L > MAX_LENGTH]
    if beyond:
        raise ConfigError(f"{where}: {max(beyond):,} tokens is beyond the longest context evaluated here, "
                          f"2**24 = {MAX_LENGTH:,} tokens (positions are float32, exact integers only up to 2**24)")


def forward_floor_bytes(length: int, model_cfg, scores: bool, generates: bool, activation_bytes: int = 4) -> int:
    """The least memory one forward pass over `length` tokens (one prompt) holds at once (see the module doc)."""
    d, elem = model_cfg.d_model, activation_bytes
    need = 4 * length * d * elem + (model_cfg.n_heads * length * length * 4 if scores else 0)
    if generates:
        need += 2 * model_cfg.n_layers * length * d * elem + length * model_cfg.vocab_size * elem
    return need


def device_memory(device: torch.device) -> int:
    """Bytes of memory on `device`: the GPU's total, or the host's physical memory."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(where: str, lengths: list[int], model_cfg, scores: bool, generates: bool, device: torch.device,
               activation_bytes: int = 4) -> None:
    """ConfigError naming `where` when the longest length cannot fit `device` (see the module doc)."""
    if not lengths:
        return
    L = max(lengths)
    need = forward_floor_bytes(L, model_cfg, scores, generates, activation_bytes)
    have = device_memory(device)
    if need > have:
        what = ["the residual stream, q, k and v"]
        what += ["the (heads, L, L) scores of the eager kernel"] if scores else []
        what += ["every layer's keys and values and the prompt's logits"] if generates else []
        raise ConfigError(f"{where}: a {L:,}-token context needs at least {need / 2**30:,.1f} GiB for one forward "
                          f"pass ({', '.join(what)}; d_model {model_cfg.d_model}) but {device.type} has "
                          f"{have / 2**30:,.1f} GiB; choose shorter lengths")
