"""`gpu_check.py kernels`: where a training step's time goes, how fast each library kernel trains, and is every
attention kernel right on this device? One call fits a lent GPU's 9 minutes (`default_budget_s`).

In order, each under its share of the budget (a row that no longer fits is skipped and says so; rows that compile
carry their compile seconds):
  profile      one step of the first throughput row's model (tiny, torch's kernels) under torch.profiler: device
               time by kind of kernel and the top kernels (gpucheck/profile.py)
  throughput   the real loop (train.compile, bf16, the preset's micro-batch) per row of gpucheck/rows.py: per size
               (tiny, small) the anchor PE with torch's kernels, each model.kernels option alone, then all at once
               (an option that cannot run here is a skipped row with the reason); then the other PEs (T5, KERPLE,
               FIRE and relative_learned through sdpa_dense, `auto`'s choice for a learned bias on CUDA). Tokens/s
               (median of the logged rates after warm-up) and against the anchor of its size, MFU (FLOPs per token as
               nanoGPT counts them, 6 N + 12 L d T) against the datasheet peak and against the bf16 matmul rate
               measured in this call, the peak memory against posbench/training/memory_model.py's prediction
  correctness  per PE family, every kernel that claims the PE against the fp32 eager kernel, the compiled training
               path in bf16 and KV-cache decoding (gpucheck/correctness.py has the tolerances), rows never measured on
               a GPU first
  tests        the GPU-only tests (`pytest -m gpu`), in a subprocess with its own time limit
  resume       the real loop on this device: a run stopped and resumed from its checkpoint gives the
               uninterrupted run's per-step losses bit for bit (measured on the H100: last)
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from posbench.config import load_config
from posbench.gpucheck.args import check_names
from posbench.gpucheck.common import (
    Budget,
    ModeResult,
    Report,
    environment,
    failed_rows,
    fresh_compile,
    logged_rows,
    markdown_table,
    matmul_peak,
)
from posbench.gpucheck.correctness import CheckDims, case_names, correctness
from posbench.gpucheck.profile import profile_step
from posbench.gpucheck.rows import ThroughputRow, throughput_rows
from posbench.model.flops import model_stats
from posbench.pe import PES
from posbench.presets import preset_names
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from posbench.training.memory_model import peak_bytes
from posbench.training.metrics import peak_flops
from posbench.training.plan import loss_chunk_tokens

ROOT = Path(__file__).resolve().parents[3]
DATASHEET_BF16 = 989e12  # H100 SXM dense bf16, the figure MFU is usually quoted against
# the budget's weights, in order: a part gets its weight's share of what is left when it starts, among the parts
# still to run (a skipped part leaves its time to the others)
SHARES = {"profile": 0.06, "throughput": 0.45, "correctness": 0.39, "tests": 0.06, "resume": 0.04}
TESTS_CAP_S = 60.0  # the GPU-only tests compile flex per PE: enough for them, not the whole budget
# pretrain's PEs first: their tiny rows leave inductor's cache warm for its probes (all, or a second process)
DEFAULT_PES = ["rope", "alibi", "none", "fox", "rnope_swa", "t5", "kerple_log", "fire", "relative_learned"]


@dataclass
class Dims:
    checks: CheckDims
    tp_rows: list[ThroughputRow] = field(default_factory=list)  # gpucheck/rows.py's order
    tp_steps: int = 30
    tp_warmup: int = 10


def dims_for(args) -> Dims:
    if args.dry_run:
        return Dims(CheckDims(32, 4, 64, 32, 61, 2, compile_backend="aot_eager"),
                    throughput_rows(["nano"], args.pes[:2]), tp_steps=6, tp_warmup=1)
    return Dims(CheckDims(128, 4, 256, 256, 512, 2), throughput_rows(args.sizes, args.pes))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", nargs="+", default=["tiny", "small"],
                   help="kernels: throughput sizes, smallest first, each with every model.kernels option")
    p.add_argument("--pes", nargs="+", default=DEFAULT_PES,
                   help="kernels: throughput PEs (the first: the anchor the options are timed on)")
    p.add_argument("--cases", nargs="*", default=None,
                   help="kernels: only the correctness cases of these PEs or labels (default: every case)")
    p.add_argument("--skip", nargs="*", default=[], choices=list(SHARES), help="kernels: parts not to run")


def check_args(args) -> None:
    """Before any work (gpucheck/args.py): sizes are model presets (the dry run's toy rows included: a typo is not
    left for the GPU call to find), PEs registered, cases the table has."""
    check_names("--sizes", args.sizes, preset_names("model"))
    check_names("--pes", args.pes, PES.names())
    check_names("--cases", args.cases, case_names())


def default_budget_s(dry_run: bool) -> float:
    return 150.0 if dry_run else 520.0


# ---------------------------------------------------------------------------------------------- the loop


def loop_config(size: str, pe: str, device: torch.device, out_dir: str, steps: int, warmup: int, extra=(),
                micro_batch: int | None = None):
    """The real loop's config for a timed run of `steps` steps, logging every 5 (a rate per 5 steps)."""
    over = ["model.seq_len=64"] if size == "nano" else []
    over += [f"train.out_dir={out_dir}", f"train.run_name={size}_{pe}", f"train.device={device.type}",
             "train.budget_unit=tokens", f"train.log_interval={5 if steps % 5 == 0 and warmup % 5 == 0 else 1}",
             "train.eval_interval=0", "train.ckpt_interval=0", "logging.wandb=disabled", "schedule.warmup_tokens=0",
             "schedule.warmup_frac=0", "schedule.decay_frac=0.01", f"train.max_steps={steps}"]
    if device.type == "cuda":
        over += ["train.compile=true", "train.precision=bf16"]
    cfg = load_config(model_size=size, pe_type=pe, overrides=[*over, *extra])  # `extra` last: it wins
    if micro_batch:
        cfg.train.micro_batch = micro_batch
    per_step = cfg.train.micro_batch * cfg.model.seq_len
    cfg.train.global_batch_tokens = per_step
    cfg.train.target_budgets = [float(per_step * steps * 100)]
    return cfg


def throughput_row(row: ThroughputRow, dims: Dims, device: torch.device, matmul_rate: float, tmp: str) -> dict:
    name = re.sub(r"[^A-Za-z0-9]+", "-", f"{row.size}_{row.pe}_{row.label}")  # one run directory per row
    cfg = loop_config(row.size, row.pe, device, tmp, dims.tp_steps, dims.tp_warmup,
                      [*row.overrides, f"train.run_name={name}"], micro_batch=2 if device.type == "cpu" else None)
    source = RandomTokens(cfg.model.vocab_size, cfg.model.seq_len)
    fresh_compile()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    out = train(cfg, source)
    wall = time.perf_counter() - t0
    rows = logged_rows(out["run_dir"], "tokens_per_s")
    rates = [r["tokens_per_s"] for r in rows if r["step"] > dims.tp_warmup]
    tok_s = statistics.median(rates)
    stats = model_stats(cfg.model, cfg.pe, device.type)
    chunk = loss_chunk_tokens(cfg)
    predicted = peak_bytes(cfg, cfg.train.micro_batch, chunk).total
    measured = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    peak = peak_flops(device) or (DATASHEET_BF16 if device.type == "cuda" else 0.0)
    flops = stats.flops_per_token_train * tok_s
    steps_s = dims.tp_steps * cfg.train.micro_batch * cfg.model.seq_len / tok_s
    return {"kernel": stats.kernels[0], "params_M": stats.params_total / 1e6, "micro_batch": cfg.train.micro_batch,
            "seq_len": cfg.model.seq_len, "tok_s": tok_s, "mfu_datasheet": flops / peak if peak else None,
            "mfu_measured": flops / matmul_rate, "gflop_per_token": stats.flops_per_token_train / 1e9,
            "mem_gb": measured / 1e9 if measured is not None else None, "model_gb": predicted / 1e9,
            "mem_vs_model": measured / predicted - 1 if measured is not None else None,
            "setup_compile_s": round(wall - steps_s, 1), "compiled": cfg.train.compile}


def throughput(report: Report, dims: Dims, device: torch.device, budget: Budget, matmul_rate: float) -> None:
    last: dict[str, float] = {}  # the slowest row of each size so far
    anchor: dict[str, float] = {}  # tokens/s of each size's anchor (the first PE, torch's kernels)
    with tempfile.TemporaryDirectory() as tmp:
        for tp in dims.tp_rows:
            key = {"size": tp.size, "pe": tp.pe, "options": tp.label}
            unusable = tp.unusable(device.type)
            if unusable:  # an option this machine cannot run is said, not timed
                report.add("throughput", {**key, "status": "skipped", "error": unusable})
                continue
            # a new size: twice the previous size's slowest row, until a row of its own is timed
            need = last.get(tp.size) or 2 * max(last.values(), default=0.0)
            measure = lambda r=tp: throughput_row(r, dims, device, matmul_rate, tmp)  # noqa: E731
            row = report.attempt("throughput", key, measure, budget, need)
            if row["status"] == "ok":
                last[tp.size] = max(last.get(tp.size, 0.0), row["wall_s"])
                if tp.pe == dims.tp_rows[0].pe and not tp.options:
                    anchor[tp.size] = row["tok_s"]
                row["vs_anchor"] = row["tok_s"] / anchor[tp.size] if tp.size in anchor else None
                report.save()


def resume_row(device: torch.device, tmp: str) -> dict:
    """The loop stopped at step 4 and resumed to 8 against 8 straight steps (train.max_steps counts the steps of
    one invocation; resume=auto)."""
    # uncompiled (bf16 on CUDA): what resume restores is the state, and a compile would cost most of this row's time
    extra = ["model.seq_len=128", "train.ckpt_interval=4", "train.log_interval=1", "model.dropout=0.1",
             "train.compile=false"]
    base = lambda name, *more: loop_config("nano", "alibi", device, tmp, 8, 0,
                                           [*extra, f"train.run_name={name}", *more], micro_batch=4)
    cfg = base("full")
    source = RandomTokens(cfg.model.vocab_size, cfg.model.seq_len)
    full = train(cfg, source)
    train(base("part", "train.max_steps=4"), source)
    rest = train(base("part", "train.resume=auto", "train.max_steps=4"), source)  # max_steps: of this run
    a, b = ({r["step"]: r["loss"] for r in logged_rows(run["run_dir"], "loss")} for run in (full, rest))
    same = sorted(a) == sorted(b) and all(a[s] == b[s] for s in a)
    diff = max((abs(a[s] - b[s]) for s in a if s in b), default=float("nan"))
    return {"steps": len(a), "max_loss_diff": diff, "pass": same,
            "note": "alibi, nano, seq 128, dropout 0.1" + (", bf16, not compiled" if device.type == "cuda" else "")}


# ---------------------------------------------------------------------------------------------- the mode


def gpu_tests(device: torch.device, limit_s: float) -> dict:
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                   if "mark.gpu" in p.read_text(encoding="utf-8"))
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *files]
    paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]  # posbench from the source tree
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=max(5.0, limit_s))
    except subprocess.TimeoutExpired as e:
        raise TimeoutError(f"pytest -m gpu ran past {e.timeout:.0f} s") from None
    tail = [line for line in done.stdout.splitlines() if line.strip()][-1:] or ["(no output)"]
    print(done.stdout[-3000:], flush=True)
    return {"files": len(files), "summary": tail[0], "pass": done.returncode in (0, 5)}  # 5: all deselected


def run(args, budget: Budget, out: Path | None) -> ModeResult:
    device = torch.device("cpu" if args.dry_run else "cuda")
    dims = dims_for(args)
    report = Report("kernels", out, meta={"env": environment(device), "dry_run": args.dry_run})
    n = 1024 if args.dry_run else 8192
    report.meta["matmul_bf16_tflops"] = matmul_peak(device, torch.bfloat16, n, 3 if args.dry_run else 10) / 1e12
    report.meta["matmul_fp32_tflops"] = matmul_peak(device, torch.float32, n // 2, 3 if args.dry_run else 10) / 1e12
    report.save()
    matmul_rate = report.meta["matmul_bf16_tflops"] * 1e12 if device.type == "cuda" else \
        report.meta["matmul_fp32_tflops"] * 1e12
    print(f"[kernels] {report.meta['env']}; matmul bf16 {report.meta['matmul_bf16_tflops']:.1f} TFLOP/s",
          flush=True)
    parts = [p for p in SHARES if p not in set(args.skip)]

    def part(name: str) -> Budget:
        weights = [SHARES[p] for p in parts[parts.index(name):]]
        return budget.part(weights[0] / sum(weights))

    if "profile" in parts and dims.tp_rows:
        first = dims.tp_rows[0]  # the smallest size's anchor with torch's kernels: where a step's time goes
        with tempfile.TemporaryDirectory() as tmp:
            cfg = loop_config(first.size, first.pe, device, tmp, dims.tp_steps, dims.tp_warmup,
                              micro_batch=2 if device.type == "cpu" else None)
        report.attempt("profile", {"size": first.size, "pe": first.pe}, lambda: profile_step(cfg, device),
                       part("profile"))
    if "throughput" in parts:
        throughput(report, dims, device, part("throughput"), matmul_rate)
    if "correctness" in parts:
        correctness(report, dims.checks, device, part("correctness"), args.cases)
    if "tests" in parts:
        limit = min(TESTS_CAP_S, part("tests").left())
        report.attempt("tests", {"what": "pytest -m gpu"}, lambda: gpu_tests(device, limit))
    if "resume" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            report.attempt("resume", {"what": "stop at 4, resume to 8"}, lambda: resume_row(device, tmp),
                           part("resume"), 5.0)
    return ModeResult(tables(report, device), failed_rows(report))


def tables(report: Report, device: torch.device) -> list[str]:
    env = report.meta["env"]
    head = (f"{env.get('gpu', 'CPU')}, torch {env['torch']}, bf16 matmul {report.meta['matmul_bf16_tflops']:.0f} "
            f"TFLOP/s measured")
    t = report.tables
    texts = [markdown_table(f"GPU-only tests ({head})", t.get("tests", []),
                         [("what", "tests", ""), ("files", "files", ""), ("summary", "result", "")])]
    texts.append(markdown_table("Kernel correctness against the fp32 eager kernel (relative errors)",
                             t.get("correctness", []),
                             [("family", "family", ""), ("pe", "PE", ""), ("kernel", "kernel", ""),
                              ("dtype", "dtype", ""), ("fwd_err", "fwd err", ".1e"), ("grad_err", "grad err", ".1e"),
                              ("step_err", "3-step loss", ".1e"), ("tol", "tolerance", ""), ("pass", "pass", ""),
                              ("wall_s", "s", ".1f"), ("note", "note", "")]))
    texts.append(markdown_table("Resume on this device", t.get("resume", []),
                             [("what", "run", ""), ("steps", "steps", ""), ("max_loss_diff", "max |dloss|", ".1e"),
                              ("pass", "bit-identical", ""), ("note", "note", "")]))
    texts.append(markdown_table(f"Training throughput: the loop, {'compiled bf16' if device.type == 'cuda' else 'fp32'}"
                             f" ({head})", t.get("throughput", []),
                             [("size", "size", ""), ("pe", "PE", ""), ("options", "model.kernels", ""),
                              ("kernel", "kernel", ""), ("params_M", "params M", ".0f"), ("micro_batch", "mb", ""),
                              ("tok_s", "tok/s", ",.0f"), ("vs_anchor", "vs torch", ".0%"),
                              ("mfu_datasheet", "MFU (989)", ".1%"), ("mfu_measured", "MFU (measured)", ".1%"),
                              ("mem_gb", "peak GB", ".2f"), ("model_gb", "model GB", ".2f"),
                              ("mem_vs_model", "vs model", "+.0%"), ("setup_compile_s", "setup s", ".0f"),
                              ("wall_s", "wall s", ".0f")]))
    for r in t.get("profile", []):
        if r["status"] != "ok":
            texts.append(markdown_table("Where a training step's time goes", [r], [("size", "size", ""),
                                                                                     ("pe", "PE", "")]))
            continue
        shares = [{"kind": k, "share": v, "ms": v * r["device_ms"]} for k, v in r["shares"].items()]
        texts.append(markdown_table(
            f"Where a training step's time goes: {r['size']} {r['pe']}, {r['step_ms']:.1f} ms per step, "
            f"{r['device_ms']:.1f} ms of {'kernels' if device.type == 'cuda' else 'CPU ops'} (torch.profiler)",
            shares + r["top"], [("kind", "kind", ""), ("kernel", "largest kernels", ""), ("ms", "ms/step", ".2f"),
                                ("share", "share", ".1%")]))
    return texts

