#!/usr/bin/env python
"""Peak memory of one training step with the plain loss (full (B, T, V) logits) against the fused
chunked head + loss (model/loss.py), on CPU, at the tiny preset (d_model 512, 6 layers, V 65536) and
T 1024 by default.

    python scripts/bench_loss_memory.py                       # tiny, T 1024, micro-batch 2
    python scripts/bench_loss_memory.py --size small --micro-batch 1 --chunks 0 512 2048

Each variant runs in a fresh subprocess with glibc's mmap threshold fixed at 64 KiB, so every large
tensor is its own mapping, returned to the OS when freed, and the resident set follows the allocator.
The subprocess builds the model and AdamW, takes one step (which allocates the optimizer state), resets
the kernel's peak-RSS counter (`/proc/self/clear_refs` = 5), then measures the second step: "resident"
is VmRSS before it (weights, gradients' storage freed, optimizer state), "peak" is VmHWM during it, and
"step" = peak - resident is what the step itself adds (activations, logits, gradients). Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from posbench.cli.arg_types import count, positive_int
from posbench.cli.errors_cli import cli_entry
from posbench.errors import ConfigError, clip


def _status(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def child(size: str, seq_len: int, micro_batch: int, chunk: int) -> dict:
    import torch

    from posbench.config import load_config
    from posbench.model.transformer import Transformer
    from posbench.training.optim import build_optimizer

    torch.set_num_threads(max(1, torch.get_num_threads()))
    cfg = load_config(model_size=size, pe_type="rope", overrides=[f"model.seq_len={seq_len}"])
    torch.manual_seed(0)
    model = Transformer(cfg.model, cfg.pe, loss_chunk_tokens=chunk)
    opt = build_optimizer(model, cfg.optim, "cpu")
    x = torch.randint(0, cfg.model.vocab_size, (micro_batch, seq_len))
    y = torch.randint(0, cfg.model.vocab_size, (micro_batch, seq_len))

    def step():
        loss = model(x, y, logit_moments=True).loss  # as on the training loop's log steps
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    step()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident set
    resident = _status("VmRSS")
    loss = step()
    peak = _status("VmHWM")
    return {"chunk": chunk, "resident": resident, "peak": peak, "step": peak - resident, "loss": loss}


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="tiny")
    p.add_argument("--seq-len", type=positive_int, default=1024)
    p.add_argument("--micro-batch", type=positive_int, default=2)
    p.add_argument("--chunks", type=count, nargs="+", default=[0, 512, 2048],
                   help="tokens per chunk, 0 = the plain loss (the reference row)")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.size, args.seq_len, args.micro_batch, args.child)))
        return 0
    from posbench.config import load_config

    # the child's config, checked here: a bad --size or --seq-len is one error line (exit 2), not a child's traceback
    # inside a CalledProcessError
    load_config(model_size=args.size, pe_type="rope", overrides=[f"model.seq_len={args.seq_len}"]).resolve()
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    rows = []
    for chunk in args.chunks:
        proc = subprocess.run([sys.executable, __file__, "--size", args.size, "--seq-len", str(args.seq_len),
                               "--micro-batch", str(args.micro_batch), "--child", str(chunk)],
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:  # most often memory: a step this size does not fit this machine
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ConfigError(f"the step with --chunks {chunk} failed in its subprocess (exit {proc.returncode}: "
                              f"{clip(last, 300)}); a smaller --seq-len, --micro-batch or --size may fit")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    ref = rows[0]
    gib = 2 ** 30
    print(f"{args.size}, T {args.seq_len}, micro-batch {args.micro_batch}, fp32, CPU; one step after a warm step "
          f"(RSS, glibc mmap threshold 64 KiB)")
    header = f"{'loss':<16} {'resident GiB':>12} {'peak GiB':>9} {'step GiB':>9} {'peak vs full':>13} " \
             f"{'step vs full':>13} {'loss value':>11}"
    print(header)
    print("-" * len(header))
    for r in rows:
        name = "full logits" if r["chunk"] == 0 else f"chunked {r['chunk']}"
        print(f"{name:<16} {r['resident'] / gib:>12.2f} {r['peak'] / gib:>9.2f} {r['step'] / gib:>9.2f} "
              f"{100 * (r['peak'] / ref['peak'] - 1):>12.0f}% {100 * (r['step'] / ref['step'] - 1):>12.0f}% "
              f"{r['loss']:>11.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
