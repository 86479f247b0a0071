#!/usr/bin/env python
"""The training-memory model of docs/performance.md, per preset: FLOPs per token, bytes of weights, gradients
and AdamW state, activation bytes per token (measured), and the micro-batch that fits a GPU.

    python scripts/memory_model.py                 # all presets, 80 GB, bf16 autocast
    python scripts/memory_model.py --gpu-gb 40 --presets tiny small

Layer activations are *counted*, not guessed: one forward of the preset's blocks (B 1, T 256, CPU, bf16
autocast, SDPA, which like flash/flex attention saves only its output and log-sum-exp, no T x T) under
`torch.autograd.graph.saved_tensors_hooks`, summing each saved storage once; per layer = (2 layers) - (1 layer), at T
256 and 512: the difference is the per-token part, the rest is fixed per layer (autocast's bf16 weight copies).
Per-token bytes do not depend on T for these kernels. The head + loss is counted from the code:
  plain loss: saved bf16 logits (2V) + their fp32 copy (4V) + fp32 log-softmax (4V) = 10 V bytes per token,
              plus in backward the fp32 gradient of the logits and of their copy (8 V per token, transient);
  chunked:    saved dL/dh (4 D per token) and dL/dW (4 V D, fixed); transient: one (C, V) fp32 block and its
              bf16 copy, and the scaled dL/dW (4 V D) in backward.

Memory for one rank (DDP, no sharding): 16 B/param (fp32 weights, fp32 grads, AdamW m and v)
+ 4 B/param (DDP gradient buckets) + micro_batch x seq_len x (n_layers x per-layer + head/loss bytes per token)
+ the transient of the loss (full: the (B,T,V) fp32 gradient; chunked: one (C, V) fp32 block and dW)
+ a reserve (default 10% of the GPU + 2 GB: CUDA context, allocator fragmentation, NCCL buffers).
"""

from __future__ import annotations

import argparse

import torch

from posbench.config import load_config
from posbench.model.flops import model_stats
from posbench.model.transformer import Transformer

PRESETS = ["tiny", "small", "medium", "large"]
H100_BF16 = 989e12


def saved_bytes(cfg, n_layers: int, T: int = 256) -> int:
    cfg.model.n_layers, cfg.model.vocab_size = n_layers, 512  # the vocabulary does not change a layer
    torch.manual_seed(0)
    model = Transformer(cfg.model, cfg.pe, loss_chunk_tokens=0)
    seen: dict[int, int] = {}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
        return t

    x = torch.randint(0, cfg.model.vocab_size, (1, T))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype=torch.bfloat16):
        model(x, x)
    return sum(seen.values())


def need_bytes(mb, chunk, T, L, layer, head, V, D, state, C) -> float:
    """Bytes one rank holds at the peak of a step (the module docstring's sum, without the reserve)."""
    tokens = mb * T
    transient = tokens * V * 8 if chunk == 0 else 2 * C * V * 4 + 2 * V * D * 4
    return state + tokens * (L * layer + head) + transient


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", nargs="+", default=PRESETS)
    p.add_argument("--gpu-gb", type=float, default=80.0)
    p.add_argument("--chunk", type=int, default=512)
    args = p.parse_args(argv)
    T0 = 256
    gb = 1e9
    print(f"GPU {args.gpu_gb:.0f} GB, bf16 autocast, DDP; activations counted with saved_tensors_hooks "
          f"(B 1, T {T0}, CPU)")
    hdr = (f"{'preset':<7} {'params':>7} {'GFLOP/tok':>9} {'state GB':>8} {'act/tok/layer':>13} "
           f"{'head full':>9} {'head chunked':>12} {'mb full':>7} {'mb chunked':>10} {'GB@mb':>6} "
           f"{'step 40%':>8} {'step 50%':>8}")
    print(hdr)
    print("-" * len(hdr))
    for name in args.presets:
        cfg = load_config(model_size=name, pe_type="rope")
        L, T, V, D = cfg.model.n_layers, cfg.model.seq_len, cfg.model.vocab_size, cfg.model.d_model
        stats = model_stats(cfg.model, cfg.pe, "cuda")
        P = stats.params_total
        # per layer at T0 and 2 T0: the difference per token, the rest fixed (autocast's bf16 weight copies)
        at = [saved_bytes(cfg, 2, t) - saved_bytes(cfg, 1, t) for t in (T0, 2 * T0)]
        layer = (at[1] - at[0]) / T0
        fixed = at[0] - layer * T0
        head = {0: 10 * V, args.chunk: 4 * D}  # per token, see the module docstring
        state = 20 * P + L * fixed  # 16 B/param + DDP buckets + bf16 weight copies saved for backward
        reserve = 0.1 * args.gpu_gb * gb + 2 * gb

        need = {chunk: [need_bytes(2 ** k, chunk, T, L, layer, head[chunk], V, D, state, args.chunk)
                        for k in range(12)] for chunk in (0, args.chunk)}
        best = {c: max([2 ** k for k, b in enumerate(n) if b + reserve <= args.gpu_gb * gb], default=0)
                for c, n in need.items()}
        used = need[args.chunk][best[args.chunk].bit_length() - 1] / gb if best[args.chunk] else float("nan")
        gbt = 524288  # train.global_batch_tokens default
        t40, t50 = (stats.flops_per_token_train * gbt / (H100_BF16 * f) for f in (0.4, 0.5))
        print(f"{name:<7} {P / 1e6:>6.0f}M {stats.flops_per_token_train / 1e9:>9.2f} {state / gb:>8.1f} "
              f"{layer:>11,.0f} B {head[0]:>7,.0f} B {head[args.chunk]:>10,.0f} B "
              f"{best[0]:>7} {best[args.chunk]:>10} {used:>6.1f} {t40:>7.2f}s {t50:>7.2f}s")
    print(f"step = train.global_batch_tokens ({524288:,}) x FLOPs/token / (989 TFLOP/s x MFU) on ONE H100; "
          "divide by the number of GPUs.")


if __name__ == "__main__":
    raise SystemExit(main())
