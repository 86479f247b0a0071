#!/usr/bin/env python
"""README smoke training and a 3-length evaluation at several intra-op thread counts (`train.threads`,
eval's `--threads`), each in a fresh process, the counts alternating so a shared machine's load falls on all.

    python scripts/bench_threads.py                        # 1 thread, then torch's default (every core)
    python scripts/bench_threads.py --threads 1,2,4 --repeats 5

Training: the README's smoke run (nano, bytes tokenizer, random tokens, 65,536 tokens in 32 steps), its
tokens/s as the loop logs it every 2 steps (median over the run, the first row left out: it holds the warm-up)
and the command's wall time. Evaluation: the README's smoke evaluation (`--suite all --ppl-text README.md --set
algorithmic.n_examples=4`) of that run's checkpoint at 3 lengths (0.5x, 1x, 2x its 128-token seq_len), wall time.
The load average (1 minute) before and after is printed: on a shared machine the absolute numbers move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ["--model-size", "nano", "data.tokenizer.name=bytes", "train.stream=random", "train.budget_unit=tokens",
         "train.target_budgets=[65536]", "train.global_batch_tokens=2048", "train.micro_batch=16",
         "train.log_interval=2", "logging.wandb=disabled"]
EVAL = ["--suite", "all", "--ppl-text", str(ROOT / "README.md"), "--set", "algorithmic.n_examples=4",
        "--lengths", "64,128,256", "--no-progress"]


def torch_default_threads() -> int:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                         capture_output=True, text=True, env=clean_env(), check=True)
    return int(out.stdout)


def clean_env() -> dict:
    # the thread count under test comes from the flag alone
    return {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}


def run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=clean_env(), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t0


def one(threads: int, work: Path) -> dict:
    out = work / f"t{threads}_{time.monotonic_ns()}"
    train_s = run([sys.executable, "train.py", *SMOKE, f"train.threads={threads}", f"train.out_dir={out}"])
    run_dir = next(out.iterdir())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r][1:]
    eval_s = run([sys.executable, "eval.py", str(run_dir), *EVAL, "--threads", str(threads), "--out",
                  str(out / "eval")])
    return {"tok_s": statistics.median(rates), "train_s": train_s, "eval_s": eval_s}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--threads", default="", help="comma-separated counts (default: 1 and torch's default)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    default = torch_default_threads()
    counts = [int(t) for t in args.threads.split(",")] if args.threads else sorted({1, default})
    load0 = os.getloadavg()[0]
    results: dict[int, list[dict]] = {t: [] for t in counts}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for t in counts if r % 2 == 0 else counts[::-1]:
                results[t].append(one(t, Path(tmp)))
                print(f"repeat {r + 1}, {t} thread(s): {results[t][-1]}", file=sys.stderr, flush=True)
    load1 = os.getloadavg()[0]
    print(f"{os.cpu_count()} CPUs, {len(os.sched_getaffinity(0))} usable; torch's default {default} threads; "
          f"load average {load0:.1f} before, {load1:.1f} after; {args.repeats} repeats, median (min-max)\n")
    print("| threads | smoke training tok/s | smoke training wall s | 3-length eval wall s |")
    print("|---|---|---|---|")

    def cell(values: list[float], fmt: str) -> str:
        return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"

    for t in counts:
        rs = results[t]
        label = f"{t}" + (" (torch default)" if t == default else "")
        print(f"| {label} | {cell([x['tok_s'] for x in rs], ',.0f')} | {cell([x['train_s'] for x in rs], '.1f')} "
              f"| {cell([x['eval_s'] for x in rs], '.1f')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
