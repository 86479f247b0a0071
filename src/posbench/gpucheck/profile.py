"""Where one training step's time goes: the loop's model and step (compiled as `train.compile` compiles it, bf16
autocast, fused AdamW on CUDA) under `torch.profiler`, its device time grouped by kind of kernel.

The first H100 call measured tiny RoPE at 25% MFU against a goal of 45% and had no time left to say why; this
table is what the next call needs to decide (narrow matmuls, elementwise ops, attention, the optimizer or the
loss). Kinds are read from kernel names (`KINDS`: the first pattern a name contains wins, checked in order), so
the table also lists the largest kernels by name to check the grouping against.
"""

from __future__ import annotations

import time

import torch

from posbench.config import RunConfig
from posbench.model.build import build_model
from posbench.training.batch_sources import RandomTokens
from posbench.training.optim import build_optimizer
from posbench.training.plan import loss_chunk_tokens

# (kind, substrings of a kernel's name), first match wins: CUDA kernels (cuBLAS/CUTLASS gemms, flash and flex
# attention, inductor's generated triton kernels, fused AdamW) and the CPU ops of a dry run
KINDS = [
    ("attention", ("flash", "fmha", "attention", "flex", "triton_tem")),
    ("matmul", ("gemm", "cutlass", "sm90_xmma", "nvjet", "aten::mm", "aten::addmm", "aten::bmm", "matmul")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("fused elementwise/reduction", ("triton_poi", "triton_red", "triton_per")),
    ("copy/cast", ("copy", "cast", "to_copy", "memcpy", "memset", "fill")),
]
OTHER = "other"


def kind_of(name: str) -> str:
    low = name.lower()
    return next((kind for kind, keys in KINDS if any(k in low for k in keys)), OTHER)


def profile_step(cfg: RunConfig, device: torch.device, steps: int = 3, warmup: int = 3, top: int = 8) -> dict:
    """Mean step time of `steps` profiled steps after `warmup` (the compile), the share of device time per kind
    and the `top` kernels by self time."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, cfg.pe, device.type, loss_chunk_tokens(cfg)).to(device)
    step_model = torch.compile(model) if cfg.train.compile else model
    opt = build_optimizer(model, cfg.optim, device.type)
    source = RandomTokens(cfg.model.vocab_size, cfg.model.seq_len, cfg.seed)
    x, y = (t.to(device) for t in source.samples(list(range(cfg.train.micro_batch))))
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step():
        with autocast:
            loss = step_model(x, y).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    _sync(device)
    activities = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.profiler.profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(device)
        step_s = (time.perf_counter() - t0) / steps
    return {"step_ms": 1e3 * step_s, **kernel_shares(prof.key_averages(), device, steps, top)}


def kernel_shares(events, device: torch.device, steps: int, top: int) -> dict:
    """Device self time per kind (CUDA kernels on a GPU; on a CPU the ops' own time, leaf ops only) and the top
    kernels, each as ms per step and share of the total."""
    on_cuda = device.type == "cuda"
    rows = []
    for e in events:
        t_us = e.self_device_time_total if on_cuda else e.self_cpu_time_total
        if t_us > 0 and (on_cuda or not e.key.startswith(("ProfilerStep", "autograd::", "Torch-Compiled"))):
            rows.append((e.key, t_us / 1e3 / steps))
    total = sum(t for _, t in rows) or float("nan")
    shares: dict[str, float] = {}
    for name, t in rows:
        shares[kind_of(name)] = shares.get(kind_of(name), 0.0) + t
    ranked = sorted(rows, key=lambda r: -r[1])[:top]
    return {"device_ms": total, "shares": {k: v / total for k, v in sorted(shares.items(), key=lambda kv: -kv[1])},
            "top": [{"kernel": n[:90], "kind": kind_of(n), "ms": t, "share": t / total} for n, t in ranked]}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
