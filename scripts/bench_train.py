#!/usr/bin/env python
"""Training-step benchmark: our loop (posbench.training.train) against a bare PyTorch loop with the
same model, batch, optimizer and clipping. Both read one fixed batch, so the difference is the
framework's overhead (schedule, finite checks, logging, metrics), not data generation.

    python scripts/bench_train.py                          # CPU: nano and a small CPU model, rope + alibi
    python scripts/bench_train.py --device cuda --sizes tiny small --pes rope alibi --json out.json
    python scripts/bench_train.py --peer [--compile]       # against transformers' Qwen3ForCausalLM

Prints one table; tokens/s is the median over measured steps (after warmup steps). Our loop reports a
rate per log row (tokens since the previous row / time since it), so it logs every 5 steps when --warmup and
--steps are multiples of 5 (as a real run logs: per-step logging costs amortised), else every step; the
table's header says which. MFU needs a known peak (the CUDA table of training/metrics.py): n/a on a CPU,
where --peer measures one.

--peer: the same training step (forward, loss, backward, clip 1.0, AdamW, zero_grad, one .item()) of
posbench's RoPE decoder and of `transformers.Qwen3ForCausalLM` with identical dimensions and weights
(interop/hf_qwen3.py's mapping; the script checks the two losses agree first), steps interleaved in
one process so both see the same machine load, at cpu-small and at `peer-512` (d_model 512, 6 layers,
T 512, V 32768). posbench runs as the loop would (train.loss=auto: the fused chunked loss from V 32768);
--compile adds the torch.compile'd posbench step (train.compile=true). The MFU column is the fraction of
this machine's measured matmul peak (median of big fp32 matmuls, timed in the same process, same clock and
threads). On a shared CPU, `--threads 1 --clock thread` times the step's own compute (wall time there
swings 2x from step to step with the neighbours' load); the order of the variants rotates every step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from posbench.cli.arg_types import count, positive_int, thread_count
from posbench.cli.errors_cli import cli_entry
from posbench.config import load_config
from posbench.model.flops import model_stats
from posbench.model.transformer import Transformer
from posbench.training.device import choose_precision
from posbench.training.loop import train
from posbench.training.metrics import mfu, peak_flops
from posbench.training.optim import build_optimizer

CPU_SIZES = {
    "nano": ["model.seq_len=128"],
    "cpu-small": ["model.d_model=256", "model.n_layers=4", "model.n_heads=4", "model.d_ff=1024",
                  "model.vocab_size=8192", "model.seq_len=256"],
    "peer-512": ["model.d_model=512", "model.n_layers=6", "model.n_heads=8", "model.d_ff=2048",
                 "model.vocab_size=32768", "model.seq_len=512"],
}
PEER_SIZES = ["cpu-small", "peer-512"]


class FixedBatch:
    def __init__(self, vocab, micro_batch, seq_len):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, vocab, (micro_batch, seq_len), generator=g)
        self.y = torch.randint(0, vocab, (micro_batch, seq_len), generator=g)
        self.fingerprint = "bench-fixed"
        self.tokenizer_fingerprint = ""
        self.content = {}  # no shard files

    def samples(self, indices):
        return self.x, self.y

    val_samples = samples

    def n_val(self):
        return 1


def log_interval(steps: int, warmup: int) -> int:
    """Every 5 steps when the measured steps are whole log intervals (each rate then covers 5 measured steps,
    none of the warmup), else every step: a log row's rate covers the steps since the previous row."""
    return 5 if warmup % 5 == 0 and steps % 5 == 0 else 1


def config_for(size, pe, device, micro_batch, steps, out_dir, warmup=0):
    preset = size if size not in CPU_SIZES else "nano"
    extra = CPU_SIZES.get(size, [])
    cfg = load_config(model_size=preset, pe_type=pe, overrides=extra + [
        f"train.out_dir={out_dir}", f"train.run_name=bench_{size}_{pe}", f"train.device={device}",
        f"train.micro_batch={micro_batch}", "train.budget_unit=tokens",
        f"train.log_interval={log_interval(steps, warmup)}",
        "train.eval_interval=0", "train.ckpt_interval=0", "logging.wandb=disabled", "train.keep_last=2",
        "schedule.warmup_tokens=0", "schedule.warmup_frac=0", "schedule.decay_frac=0.01"])
    tokens_per_step = micro_batch * cfg.model.seq_len
    cfg.train.global_batch_tokens = tokens_per_step
    cfg.train.target_budgets = [float(tokens_per_step * steps * 100)]
    cfg.train.max_steps = steps
    return cfg


def ours(cfg, source) -> list[float]:
    """Tokens/s of each step of our loop: a log row's rate, given to every step since the previous row."""
    out = train(cfg, source)
    rows = [json.loads(x) for x in (Path(out["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    rates, last = [], 0
    for r in rows:
        if "tokens_per_s" in r:
            rates += [r["tokens_per_s"]] * (r["step"] - last)
            last = r["step"]
    if last != out["step"]:
        raise RuntimeError(f"the loop logged up to step {last} of {out['step']}: log_interval does not divide --steps")
    return rates


def bare(cfg, source, steps, device) -> list[float]:
    torch.manual_seed(cfg.seed)
    # the loss path by vocabulary and logit moments every step, as this bare loop has always had them
    model = Transformer(cfg.model, cfg.pe, device.type).to(device)
    opt = build_optimizer(model, cfg.optim, device.type)
    precision = choose_precision("auto", device.type)
    x, y = source.x.to(device), source.y.to(device)
    rates = []
    for _ in range(steps):
        t0 = time.perf_counter()
        with precision.autocast():
            loss = model(x, y, logit_moments=True).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()  # our loop syncs on the loss every step too (finite check)
        rates.append(x.numel() / (time.perf_counter() - t0))
    return rates


def matmul_peak(device, n=2048, repeats=5, clock=time.perf_counter) -> float:
    """Measured fp32 matmul FLOP/s of this device (median of `repeats` n x n x n products)."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    times = []
    for _ in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = clock()
        (a @ b).sum().item()
        times.append(clock() - t0)
    return 2 * n ** 3 / statistics.median(times[1:])


def peer_model(cfg, ours_model, device):
    """transformers' Qwen3ForCausalLM with posbench's dimensions and (renamed) weights."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from posbench.interop.hf_qwen3 import hf_state_dict, rope_parameters

    m = cfg.model
    hf_cfg = Qwen3Config(vocab_size=m.vocab_size, hidden_size=m.d_model, intermediate_size=m.d_ff,
                         num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads, num_key_value_heads=m.n_heads,
                         head_dim=m.head_dim, hidden_act="silu", max_position_embeddings=m.seq_len,
                         rms_norm_eps=m.norm_eps, tie_word_embeddings=True, rope_parameters=rope_parameters(cfg),
                         attention_bias=False, attention_dropout=0.0, use_sliding_window=False)
    hf_cfg._attn_implementation = "sdpa"
    peer = Qwen3ForCausalLM(hf_cfg).to(device)
    missing, unexpected = peer.load_state_dict(hf_state_dict(ours_model.state_dict(), m.n_layers), strict=False)
    if unexpected or any(k != "lm_head.weight" for k in missing):
        raise RuntimeError(f"weight mapping failed: missing {missing}, unexpected {unexpected}")
    peer.tie_weights()
    return peer.train()


def peer_bench(args, device) -> list[dict]:
    """posbench vs Qwen3ForCausalLM (and compiled posbench), one step each in turn; see the docstring."""
    from posbench.model.loss import auto_chunk_tokens

    peak = matmul_peak(device, clock=time.thread_time if args.clock == "thread" else time.perf_counter)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes or PEER_SIZES:
            cfg = config_for(size, "rope", args.device, args.micro_batch, args.steps, tmp)
            source = FixedBatch(cfg.model.vocab_size, args.micro_batch, cfg.model.seq_len)
            x, y = source.x.to(device), source.y.to(device)
            torch.manual_seed(cfg.seed)
            t = cfg.train
            chunk = auto_chunk_tokens(cfg.model.vocab_size, t.loss, t.loss_chunk_tokens)
            ours = Transformer(cfg.model, cfg.pe, device.type, loss_chunk_tokens=chunk).to(device)
            peer = peer_model(cfg, ours, device)
            with torch.no_grad():
                diff = abs(ours(x, y).loss.item() - peer(input_ids=x, labels=y, shift_labels=y).loss.item())
            precision = choose_precision("auto", device.type)
            # no logit moments, as on the loop's non-log steps
            variants = {"posbench": (ours, lambda m=ours, x=x, y=y: m(x, y).loss),
                        "peer": (peer, lambda m=peer, x=x, y=y: m(input_ids=x, labels=y, shift_labels=y).loss)}
            if args.compile:
                twin = Transformer(cfg.model, cfg.pe, device.type, loss_chunk_tokens=chunk).to(device)
                twin.load_state_dict(ours.state_dict())
                compiled = torch.compile(twin)
                variants["compiled"] = (twin, lambda m=compiled, x=x, y=y: m(x, y).loss)
            opts = {k: build_optimizer(m, cfg.optim, device.type) if k != "peer" else
                    torch.optim.AdamW(m.parameters(), lr=cfg.optim.lr, fused=device.type == "cuda")
                    for k, (m, _) in variants.items()}
            times = {k: [] for k in variants}
            clock = time.thread_time if args.clock == "thread" else time.perf_counter
            names = list(variants)
            for i in range(args.steps):
                for k in names[i % len(names):] + names[:i % len(names)]:  # rotate who goes first
                    m, loss_fn = variants[k]
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    t0 = clock()
                    with precision.autocast():
                        loss = loss_fn()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                    opts[k].step()
                    opts[k].zero_grad(set_to_none=True)
                    loss.item()
                    times[k].append(clock() - t0)
            stats = model_stats(cfg.model, cfg.pe, args.device)
            tok_s = {k: x.numel() / statistics.median(v[args.warmup:]) for k, v in times.items()}
            results.append({"size": size, "params": stats.params_total, "loss_diff": diff,
                            "loss_chunk_tokens": chunk, "peak_tflops": peak / 1e12,
                            **{f"{k}_tok_s": v for k, v in tok_s.items()},
                            **{f"{k}_mfu": stats.flops_per_token_train * v / peak for k, v in tok_s.items()}})
    print(f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, threads "
          f"{torch.get_num_threads()}, micro-batch {args.micro_batch}, median of steps {args.warmup}..{args.steps} "
          f"(interleaved), {args.clock} clock, measured matmul peak {peak / 1e9:,.0f} GFLOP/s")
    cols = ["posbench", "peer"] + (["compiled"] if args.compile else [])
    header = f"{'size':<10} {'params':>11} {'loss':>8} " + " ".join(f"{c + ' tok/s':>15} {'MFU':>5}" for c in cols)
    header += f" {'ours/peer':>9}" + (f" {'compiled/peer':>13} {'compile x':>9}" if args.compile else "")
    header += f" {'|dloss|':>8}"
    print(header)
    print("-" * len(header))
    for r in results:
        loss = f"chunk{r['loss_chunk_tokens']}" if r["loss_chunk_tokens"] else "full"
        line = f"{r['size']:<10} {r['params']:>11,} {loss:>8} " + " ".join(
            f"{r[c + '_tok_s']:>15,.0f} {100 * r[c + '_mfu']:>4.0f}%" for c in cols)
        line += f" {r['posbench_tok_s'] / r['peer_tok_s']:>8.2f}x"
        if args.compile:
            c, o, q = r["compiled_tok_s"], r["posbench_tok_s"], r["peer_tok_s"]
            line += f" {c / q:>12.2f}x {c / o:>8.2f}x"
        print(line + f" {r['loss_diff']:>8.1e}")
    return results


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--sizes", nargs="+", default=None)
    p.add_argument("--pes", nargs="+", default=["rope", "alibi"])
    p.add_argument("--steps", type=positive_int, default=60)
    p.add_argument("--warmup", type=count, default=10)
    p.add_argument("--micro-batch", type=positive_int, default=8)
    p.add_argument("--json", default="")
    p.add_argument("--peer", action="store_true", help="against transformers' Qwen3ForCausalLM (see above)")
    p.add_argument("--compile", action="store_true", help="with --peer: also the compiled posbench step")
    p.add_argument("--threads", type=thread_count, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--clock", default="wall", choices=["wall", "thread"],
                   help="thread: CPU time of the calling thread, with --threads 1 the step's compute; steadier "
                        "than wall time on a shared machine (CPU only)")
    args = p.parse_args(argv)
    if args.steps <= args.warmup or args.warmup < 0:
        p.error(f"--steps ({args.steps}) must exceed --warmup ({args.warmup}): the measured steps are those after it")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is visible")
    if args.json and not Path(args.json).parent.is_dir():  # before the runs, not after them
        p.error(f"--json {args.json}: its folder {Path(args.json).parent} does not exist")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "thread" and (args.device != "cpu" or torch.get_num_threads() != 1):
        p.error("--clock thread measures one CPU thread: use it with --device cpu --threads 1")
    if args.peer:
        results = peer_bench(args, torch.device(args.device))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        return 0
    sizes = args.sizes or (list(CPU_SIZES) if args.device == "cpu" else ["tiny", "small"])
    device = torch.device(args.device)
    if args.device == "cpu":
        torch.set_num_threads(torch.get_num_threads())
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            for pe in args.pes:
                cfg = config_for(size, pe, args.device, args.micro_batch, args.steps, tmp, args.warmup)
                source = FixedBatch(cfg.model.vocab_size, args.micro_batch, cfg.model.seq_len)
                b = statistics.median(bare(cfg, source, args.steps, device)[args.warmup:])
                o = statistics.median(ours(cfg, source)[args.warmup:])
                stats = model_stats(cfg.model, cfg.pe, args.device)
                peak = peak_flops(device)  # 0: no known peak (a CPU, an unlisted GPU)
                results.append({"size": size, "pe": pe, "kernel": stats.kernels[0], "params": stats.params_total,
                                "bare_tok_s": b, "ours_tok_s": o, "overhead_pct": 100 * (b / o - 1),
                                "mfu": mfu(stats.flops_per_token_train, o, peak, 1) if peak else None,
                                "peak_mem_gb": torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda"
                                else None, "log_interval": cfg.train.log_interval})
    header = f"{'size':<10} {'pe':<7} {'kernel':<7} {'params':>11} {'bare tok/s':>11} {'ours tok/s':>11} " \
             f"{'overhead':>9} {'MFU':>6} {'mem GB':>7}"
    print(f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, "
          f"threads {torch.get_num_threads()}, micro-batch {args.micro_batch}, median of steps "
          f"{args.warmup}..{args.steps}; our loop logging every {log_interval(args.steps, args.warmup)} steps")
    print(header)
    print("-" * len(header))
    for r in results:
        mfu_text = "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        mem_text = "n/a" if r["peak_mem_gb"] is None else f"{r['peak_mem_gb']:.2f}"
        print(f"{r['size']:<10} {r['pe']:<7} {r['kernel']:<7} {r['params']:>11,} {r['bare_tok_s']:>11,.0f} "
              f"{r['ours_tok_s']:>11,.0f} {r['overhead_pct']:>8.1f}% {mfu_text:>6} {mem_text:>7}")
    notes = [why for flag, why in ((any(r["mfu"] is None for r in results), "MFU n/a: no known peak FLOP/s for "
                                    "this device (training/metrics.py lists CUDA GPUs; --peer measures a matmul peak)"),
                                   (device.type != "cuda", "mem GB n/a: peak memory is read on CUDA only")) if flag]
    for note in notes:
        print(note)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
