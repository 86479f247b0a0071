#!/usr/bin/env python
"""The training-memory model of docs/performance.md, per preset: FLOPs per token, bytes of weights, gradients
and AdamW state, activation bytes per token (measured), and the micro-batch that fits a GPU.

    python scripts/memory_model.py                 # all presets, 80 GB, bf16 autocast
    python scripts/memory_model.py --gpu-gb 40 --presets tiny small

The model itself (what is counted and how) is posbench/training/memory_model.py's docstring.
"""

from __future__ import annotations

import argparse

from posbench.config import load_config
from posbench.model.flops import model_stats
from posbench.training.memory_model import head_bytes_per_token, layer_bytes, peak_bytes

PRESETS = ["tiny", "small", "medium", "large"]
H100_BF16 = 989e12


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
        L, V, D = cfg.model.n_layers, cfg.model.vocab_size, cfg.model.d_model
        stats = model_stats(cfg.model, cfg.pe, "cuda")
        P = stats.params_total
        lb = layer_bytes(cfg.model, T0)
        layer, fixed = lb.per_token, lb.fixed
        head = {c: head_bytes_per_token(V, D, c) for c in (0, args.chunk)}  # per token, see the model's docstring
        state = 20 * P + L * fixed  # 16 B/param + DDP buckets + bf16 weight copies saved for backward
        reserve = 0.1 * args.gpu_gb * gb + 2 * gb

        need = {chunk: [peak_bytes(cfg, 2 ** k, chunk, ddp=True, layer=lb).total for k in range(12)]
                for chunk in (0, args.chunk)}
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
