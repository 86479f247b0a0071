"""Throughput and health metrics for the log line.

MFU (model FLOPs utilisation, PaLM appendix B) = achieved FLOP/s / peak FLOP/s, with achieved =
FLOPs per token (model/flops.py: 6 N_matmul + 12 L D T) x tokens/s summed over ranks, and peak the
dense bf16 tensor-core figure of the device times the number of devices. Unknown devices and CPUs
report MFU 0 rather than a made-up number.
"""

from __future__ import annotations

import torch

# dense bf16 peak FLOP/s per device (vendor datasheets, no sparsity)
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "H800": 989e12, "GH200": 989e12, "B200": 2250e12,
             "A100": 312e12, "A800": 312e12, "L40S": 362e12, "A10G": 125e12, "RTX 4090": 165e12}


def peak_flops(device: torch.device) -> float:
    if device.type != "cuda":
        return 0.0
    name = torch.cuda.get_device_name(device)
    for key, value in PEAK_BF16.items():
        if key in name:
            return value
    return 0.0


def mfu(flops_per_token: float, tokens_per_s: float, peak_per_device: float, world: int) -> float:
    return flops_per_token * tokens_per_s / (peak_per_device * world) if peak_per_device else 0.0


@torch.no_grad()
def grad_norms_by_layer(model) -> dict[str, float]:
    """L2 norm of the gradient of each block (and of embeddings / PE), for spotting unstable layers."""
    names, norms = [], []
    groups = {f"grad_norm/layer{i}": block.parameters() for i, block in enumerate(model.blocks)}
    groups["grad_norm/embedding"] = model.tok_emb.parameters()
    groups["grad_norm/pe"] = model.pe.parameters()
    for name, params in groups.items():
        sq = [p.grad.detach().float().pow(2).sum() for p in params if p.grad is not None]
        if sq:
            names.append(name)
            norms.append(torch.stack([s.full_tensor() if hasattr(s, "full_tensor") else s for s in sq]).sum().sqrt())
    return dict(zip(names, torch.stack(norms).tolist())) if norms else {}  # one transfer for all groups


@torch.no_grad()
def logit_stats(logits_BTV: torch.Tensor) -> dict[str, float]:
    """max |z|, std and mean of the logits; from the logits themselves or, with the fused chunked loss,
    from its moments [max |z|, sum z, sum z^2, count] (model/loss.py): one transfer either way."""
    if logits_BTV.ndim == 1:
        max_abs, s, sq, n = logits_BTV.double().tolist()
        mean = s / n
        return {"logits/max_abs": max_abs, "logits/std": max(sq - n * mean * mean, 0.0) ** 0.5 / max(n - 1, 1) ** 0.5,
                "logits/mean": mean}
    lf = logits_BTV.detach().float()
    max_abs, std, mean = torch.stack((lf.abs().max(), lf.std(), lf.mean())).tolist()
    return {"logits/max_abs": max_abs, "logits/std": std, "logits/mean": mean}
