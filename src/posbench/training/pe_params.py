"""The learned parameters of a run's PE (KERPLE's r1, r2; FIRE's c and threshold; a learned table), logged in every
metrics row (metrics.jsonl, and WandB through the same logger) so a reader sees how the PE moved over training.
A small tensor (at most ELEMENTS values) logs each value, `pe/<name>/<index>`; a larger one its RMS,
`pe/<name>/rms`. A PE without parameters (RoPE, ALiBi, NoPE) adds nothing."""

from __future__ import annotations

import torch

from posbench.pe import PositionalEncoding

ELEMENTS = 16


def pe_parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter of the model's PE modules by its name under the PE, each tensor once."""
    out, seen = {}, set()
    for prefix, module in model.named_modules():
        if not isinstance(module, PositionalEncoding):
            continue
        for name, p in module.named_parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out[f"{prefix}.{name}".removeprefix("_orig_mod.").removeprefix("module.")] = p
    return out


def pe_parameter_values(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The metrics-row scalars (0-d tensors, still on the device: log_row moves every value in one transfer)."""
    row = {}
    for name, p in pe_parameters(model).items():
        p = p.detach()
        # an FSDP2 parameter is a DTensor holding this rank's shard: full_tensor() gathers it (a collective: log_row
        # runs on every rank at the same steps), so every rank logs the whole parameter, not its slice
        flat = (p.full_tensor() if hasattr(p, "full_tensor") else p).float().reshape(-1)
        if flat.numel() <= ELEMENTS:
            row.update({f"pe/{name}/{i}": v for i, v in enumerate(flat)})
        else:
            row[f"pe/{name}/rms"] = flat.pow(2).mean().sqrt()
    return row
