"""Throughput and health metrics for the log line.

MFU (model FLOPs utilisation, PaLM appendix B) = achieved FLOP/s / peak FLOP/s, with achieved =
FLOPs per token (model/flops.py: 6 N_matmul + 12 L D T) x tokens/s summed over ranks, and peak the
dense bf16 tensor-core figure of the device times the number of devices. Unknown devices and CPUs have no
MFU (None: the log row has no `mfu`, the console says "mfu n/a (no peak for this device)" once) rather than a
made-up number: a CPU's peak depends on its cores, vector units and threads, which no table here knows.
"""

from __future__ import annotations

import torch

from posbench.model.output import ModelOutput

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


def mfu(flops_per_token: float, tokens_per_s: float, peak_per_device: float, world: int) -> float | None:
    """The fraction of the peak achieved; None when the peak is unknown (0: peak_flops found none)."""
    return flops_per_token * tokens_per_s / (peak_per_device * world) if peak_per_device else None


def _local_sq(t: torch.Tensor) -> torch.Tensor:
    # an FSDP2 DTensor's sum is a partial value: full_tensor() all-reduces it (a collective, so every
    # rank must call these functions on the same steps)
    sq = t.detach().float().pow(2).sum()
    return sq.full_tensor() if hasattr(sq, "full_tensor") else sq


def param_group(name: str) -> str:
    """Which log group a parameter belongs to: `blocks.3.attn.qkv.weight` -> layer3 (other stacks, e.g. the
    encoder's, keep their own name: encoder3); embeddings, PE, and the rest (final norm, untied head)."""
    parts = name.split(".")
    if len(parts) > 2 and parts[1].isdigit():
        return ("layer" if parts[0] == "blocks" else parts[0]) + parts[1]
    if parts[0] == "tok_emb":
        return "embedding"
    if parts[0] in ("pe", "dec_pe"):
        return "pe"
    return "other"


@torch.no_grad()
def grad_norms_by_layer(model) -> dict[str, torch.Tensor]:
    """L2 norm of the gradient of each block (and of embeddings / PE / the rest), for spotting unstable
    layers. Call it between backward and zero_grad, before clipping: the groups' norms then combine
    (root of the sum of squares) to the total norm that clip_grad_norm_ returns."""
    sums: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            key = f"grad_norm/{param_group(name)}"
            sums[key] = sums.get(key, 0.0) + _local_sq(p.grad)
    if not sums:
        return {}
    # 0-d tensors, left on the device: the loop moves them with the rest of a log row in one transfer
    return dict(zip(sums, torch.stack(list(sums.values())).sqrt().unbind()))


@torch.no_grad()
def weight_norm(model) -> torch.Tensor:
    """L2 norm of all parameters together (tied weights once): weight decay's target, and a slow drift
    that precedes loss spikes."""
    return torch.stack([_local_sq(p) for p in model.parameters()]).sum().sqrt()  # a 0-d tensor (one transfer later)


def _moments(out: ModelOutput) -> torch.Tensor:
    """The fused loss's logit moments, for an output without logits (model/output.py)."""
    if out.logit_moments is None:
        raise ValueError("this model output has neither logits nor logit moments: call the model with "
                         "logit_moments=True on the steps whose logit statistics are logged")
    return out.logit_moments


@torch.no_grad()
def output_entropy(out: ModelOutput) -> torch.Tensor:
    """Mean entropy (nats) of the next-token distribution: over the first sequence of the batch from full
    logits (one row bounds the float32 copy to T x V), over every position from the fused loss's moments
    (model/loss.py, entries 4 and 5: summed row entropies, rows). Collapse towards 0 or stuck at log V are
    both warning signs."""
    if out.logits is None:
        moments = _moments(out)
        return moments[4] / moments[5].clamp(min=1.0)
    logp = torch.log_softmax(out.logits[0].detach().float(), dim=-1)
    return -(logp.exp() * logp).sum(-1).mean()  # a 0-d tensor (one transfer later)


def peak_memory_gib(device: torch.device) -> dict[str, float]:
    """Peak allocated CUDA memory since the start (GiB); nothing on CPU, where torch does not track it."""
    if device.type != "cuda":
        return {}
    return {"memory/peak_gib": torch.cuda.max_memory_allocated(device) / 2**30}


@torch.no_grad()
def logit_stats(out: ModelOutput) -> dict[str, float]:
    """max |z|, std and mean of the logits; from the logits themselves or, with the fused chunked loss,
    from its moments [max |z|, sum z, sum z^2, count, ...] (model/loss.py): one transfer either way."""
    if out.logits is None:
        max_abs, s, sq, n = _moments(out)[:4].double().tolist()
        mean = s / n
        return {"logits/max_abs": max_abs, "logits/std": max(sq - n * mean * mean, 0.0) ** 0.5 / max(n - 1, 1) ** 0.5,
                "logits/mean": mean}
    lf = out.logits.detach().float()
    max_abs, std, mean = torch.stack((lf.abs().max(), lf.std(), lf.mean())).tolist()
    return {"logits/max_abs": max_abs, "logits/std": std, "logits/mean": mean}
