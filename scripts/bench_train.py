#!/usr/bin/env python
"""Training-step benchmark: our loop (posbench.training.train) against a bare PyTorch loop with the
same model, batch, optimizer and clipping. Both read one fixed batch, so the difference is the
framework's overhead (schedule, finite checks, logging, metrics), not data generation.

    python scripts/bench_train.py                          # CPU: nano and a small CPU model, rope + alibi
    python scripts/bench_train.py --device cuda --sizes tiny small --pes rope alibi --json out.json

Prints one table; tokens/s is the median over measured steps (after warmup steps).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from posbench.cli_errors import cli_entry
from posbench.config import load_config
from posbench.model.flops import model_stats
from posbench.model.transformer import Transformer
from posbench.training.loop import train
from posbench.training.metrics import mfu, peak_flops
from posbench.training.optim import build_optimizer
from posbench.training.precision import choose_precision

CPU_SIZES = {
    "nano": ["model.seq_len=128"],
    "cpu-small": ["model.d_model=256", "model.n_layers=4", "model.n_heads=4", "model.d_ff=1024",
                  "model.vocab_size=8192", "model.seq_len=256"],
}


class FixedBatch:
    def __init__(self, vocab, micro_batch, seq_len):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, vocab, (micro_batch, seq_len), generator=g)
        self.y = torch.randint(0, vocab, (micro_batch, seq_len), generator=g)
        self.fingerprint = "bench-fixed"
        self.tokenizer_fingerprint = ""

    def samples(self, indices):
        return self.x, self.y

    val_samples = samples

    def n_val(self):
        return 1


def config_for(size, pe, device, micro_batch, steps, out_dir):
    preset = size if size not in CPU_SIZES else "nano"
    extra = CPU_SIZES.get(size, [])
    cfg = load_config(model_size=preset, pe_type=pe, overrides=extra + [
        f"train.out_dir={out_dir}", f"train.run_name=bench_{size}_{pe}", f"train.device={device}",
        f"train.micro_batch={micro_batch}", "train.budget_unit=tokens", "train.log_interval=5",
        "train.eval_interval=0", "train.ckpt_interval=0", "logging.wandb=disabled", "train.keep_last=2",
        "schedule.warmup_tokens=0", "schedule.warmup_frac=0", "schedule.decay_frac=0.01"])
    tokens_per_step = micro_batch * cfg.model.seq_len
    cfg.train.global_batch_tokens = tokens_per_step
    cfg.train.target_budgets = [float(tokens_per_step * steps * 100)]
    cfg.train.max_steps = steps
    return cfg


def ours(cfg, source) -> list[float]:
    out = train(cfg, source)
    rows = [json.loads(x) for x in (Path(out["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    # one rate per log interval (5 steps), so per-step logging costs are amortised as in a real run
    return [r["tokens_per_s"] for r in rows if "tokens_per_s" in r for _ in range(5)]


def bare(cfg, source, steps, device) -> list[float]:
    torch.manual_seed(cfg.seed)
    model = Transformer(cfg.model, cfg.pe, device.type).to(device)
    opt = build_optimizer(model, cfg.optim, device.type)
    precision = choose_precision("auto", device.type)
    x, y = source.x.to(device), source.y.to(device)
    rates = []
    for _ in range(steps):
        t0 = time.perf_counter()
        with precision.autocast():
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()  # our loop syncs on the loss every step too (finite check)
        rates.append(x.numel() / (time.perf_counter() - t0))
    return rates


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--sizes", nargs="+", default=None)
    p.add_argument("--pes", nargs="+", default=["rope", "alibi"])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--json", default="")
    args = p.parse_args(argv)
    sizes = args.sizes or (list(CPU_SIZES) if args.device == "cpu" else ["tiny", "small"])
    device = torch.device(args.device)
    if args.device == "cpu":
        torch.set_num_threads(torch.get_num_threads())
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            for pe in args.pes:
                cfg = config_for(size, pe, args.device, args.micro_batch, args.steps, tmp)
                source = FixedBatch(cfg.model.vocab_size, args.micro_batch, cfg.model.seq_len)
                b = statistics.median(bare(cfg, source, args.steps, device)[args.warmup:])
                o = statistics.median(ours(cfg, source)[args.warmup:])
                stats = model_stats(cfg.model, cfg.pe, args.device)
                peak = peak_flops(device)
                results.append({"size": size, "pe": pe, "kernel": stats.kernels[0], "params": stats.params_total,
                                "bare_tok_s": b, "ours_tok_s": o, "overhead_pct": 100 * (b / o - 1),
                                "mfu": mfu(stats.flops_per_token_train, o, peak, 1),
                                "peak_mem_gb": torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else 0})
    header = f"{'size':<10} {'pe':<7} {'kernel':<7} {'params':>11} {'bare tok/s':>11} {'ours tok/s':>11} " \
             f"{'overhead':>9} {'MFU':>6} {'mem GB':>7}"
    print(f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, "
          f"threads {torch.get_num_threads()}, micro-batch {args.micro_batch}, median of steps "
          f"{args.warmup}..{args.steps}")
    print(header)
    print("-" * len(header))
    for r in results:
        print(f"{r['size']:<10} {r['pe']:<7} {r['kernel']:<7} {r['params']:>11,} {r['bare_tok_s']:>11,.0f} "
              f"{r['ours_tok_s']:>11,.0f} {r['overhead_pct']:>8.1f}% {100 * r['mfu']:>5.1f}% {r['peak_mem_gb']:>7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
