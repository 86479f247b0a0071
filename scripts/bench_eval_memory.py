#!/usr/bin/env python
"""Evaluation memory, predicted against measured: the bytes eval.py's memory check predicts for one perplexity
forward (evaluation/lengths.py `Footprint.forward`, the weights left out) against the peak RSS that forward adds,
per PE, kernel and length, on CPU.

    python scripts/bench_eval_memory.py                      # every row, lengths 1024 2048 4096
    python scripts/bench_eval_memory.py --lengths 1024 --rows cope alibi
    python scripts/bench_eval_memory.py --lengths 2048 --jobs 2     # two measuring subprocesses at a time
    python scripts/bench_eval_memory.py --lengths 2048 --jobs 2 --cases-per-process 13   # the slow test's form

The model is small (d_model 128, 4 heads, 2 layers, d_ff 512, vocabulary 2048, trained length 1024) so that
the (T, S) terms show at a few thousand tokens. Each row runs in a fresh subprocess with glibc's mmap threshold
fixed at 64 KiB (every large tensor its own mapping, returned to the OS when freed): it builds the model, runs one
64-token forward (thread pools, first-call buffers), resets the kernel's peak-RSS counter (`/proc/self/clear_refs`
= 5), then runs perplexity's `token_losses` over one window of T tokens with no grad; "measured" is VmHWM after it
minus VmRSS before it. Linux only. The ratio is predicted / measured; the check's promise is 1/1.5 .. 1.5.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from posbench.cli.arg_types import positive_int

MODEL = ["model.d_model=128", "model.n_heads=4", "model.n_layers=2", "model.d_ff=512", "model.vocab_size=2048",
         "model.seq_len=1024"]
# name -> (PE, model.attention, further overrides): one row per code path of the memory estimate
ROWS = {
    "rope": ("rope", "auto", []),  # SDPA, fused: linear in T
    "pope": ("pope", "auto", []),  # SDPA, q and k wider than v: the unfused math path's (T, S) scores
    "rnope_swa": ("rnope_swa", "auto", ["pe.swa_layers=1", "pe.window=256"]),  # SDPA with a (T, S) window mask
    "cope": ("cope", "auto", []),  # eager: CoPE's gates, positions and interpolation over (T, S)
    "stick_breaking": ("stick_breaking", "auto", []),  # eager: the log sticks' cumulative sums over (T, S)
    "path": ("path", "auto", []),  # eager: PaTH's correction of the logits, assembled from its chunk blocks
    "selective_rope": ("selective_rope", "auto", []),  # eager: q, k turned by token phases, rescored over (T, S)
    "grape_m_ctx": ("grape_m_ctx", "auto", []),  # eager: as selective_rope, one phase per token
    "grape_a": ("grape_a", "auto", []),  # eager: the key-gated distance bias over (T, S)
    "grape_ap": ("grape_ap", "auto", []),  # eager: edge potentials over (T, S) and their cumulative sums
    "alibi": ("alibi", "auto", []),  # sdpa_bias: the far field, linear in T
    "alibi_eager": ("alibi", "eager", []),  # eager: the (H, T, S) bias and scores
    "kerple": ("kerple_log", "auto", []),  # sdpa_bias blocked: the (T, S) allowed mask and a block at a time
    "tape": ("tape", "auto", []),  # SDPA, v wider than q and k (the carried state): the math path, the state
    "seqpe": ("seqpe", "auto", []),  # SDPA, q and k wider than v (the digit encoder's parts): the math path
    # the attention options (model/attention_sinks.py, masks.chunk_mask, attention_gate.py, attention_temperature.py)
    "rope_sinks": ("rope", "auto", ["model.attention_sinks=true"]),  # SDPA: (H, T, S + 1) float mask, zero key
    "rope_chunk": ("rope", "auto", ["model.attention_chunk=256"]),  # SDPA: the chunked bool mask, then float
    "rope_gate": ("rope", "auto", ["model.attention_gate=elementwise"]),  # the gate's (T, D) projection
    "rope_temperature": ("rope", "auto", ["model.attention_temperature.name=log_n"]),  # a tempered copy of q
    "alibi_sinks": ("alibi", "auto", ["model.attention_sinks=true"]),  # sdpa_bias runs eager: scores + sink column
    "alibi_chunk": ("alibi", "auto", ["model.attention_chunk=256"]),  # sdpa_bias runs eager: the chunk's masks
    "alibi_temperature": ("alibi", "auto", ["model.attention_temperature.name=log_n"]),  # no fast bias: blocked
    "alibi_eager_temperature": ("alibi", "eager", ["model.attention_temperature.name=log_n"]),  # the tempered grid
    "nope_eager_sinks": ("none", "eager", ["model.attention_sinks=true"]),  # the logits with the sink's column
}
MEASURE_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}


def _status(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def build(row: str):
    from posbench.config import load_config
    from posbench.model.build import build_model

    pe, attention, extra = ROWS[row]
    cfg = load_config(model_size="nano", pe_type=pe, overrides=[*MODEL, f"model.attention={attention}", *extra])
    return cfg, build_model(cfg.model, cfg.pe, "cpu").eval()


def predicted(row: str, T: int) -> int:
    """What evaluation's check predicts for one window of T tokens, the weights left out."""
    from posbench.evaluation.lengths import Footprint

    cfg, model = build(row)
    return Footprint(cfg.model, model.pe, "cpu", 0, lambda L: 1, generates=False).forward(T)


def child(row: str, T: int) -> int:
    import torch

    from posbench.evaluation.suites.ppl import token_losses

    torch.manual_seed(0)
    cfg, model = build(row)
    V = cfg.model.vocab_size
    x, y = torch.randint(0, V, (1, T)), torch.randint(0, V, (1, T))
    with torch.no_grad():
        token_losses(model, x[:, :64], y[:, :64])
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM back to the resident set
        before = _status("VmRSS")
        token_losses(model, x, y)
        peak = _status("VmHWM")
    return peak - before


def measure(cases: list[tuple[str, int]]) -> list[int]:
    """The cases measured one after another in one fresh subprocess (each its own warm-up forward and peak reset:
    what an earlier case freed went back to the OS, since every large tensor is its own mapping)."""
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(cases)], env={**os.environ, **MEASURE_ENV},
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    p.add_argument("--lengths", nargs="+", type=positive_int, default=[1024, 2048, 4096])
    p.add_argument("--jobs", type=positive_int, default=1,
                   help="measuring subprocesses at a time (default 1); each measures its own peak RSS, so more only "
                        "overlaps their interpreter starts")
    p.add_argument("--cases-per-process", type=positive_int, default=1,
                   help="(row, length) cases one subprocess measures in turn (default 1: each in a fresh process); "
                        "more saves an interpreter and torch import per case (25 rows at 2,048 tokens, 2 jobs: 35 s "
                        "with 13 a process against 88 s). It measures a little less: the rows under 40 MiB read "
                        "about 2.5 MiB less (ratios up to 0.1 higher: an earlier case's long forward leaves that "
                        "much mapped), the others within 2 MiB; tables to publish use the default")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps([child(row, T) for row, T in json.loads(args.child)]))
        return 0
    print("| row | PE | kernel | length | predicted MiB | measured MiB | ratio |")
    print("|---|---|---|---:|---:|---:|---:|")
    cases = [(row, T) for row in args.rows for T in args.lengths]
    n_procs = -(-len(cases) // args.cases_per_process)
    groups = [cases[i::n_procs] for i in range(n_procs)]  # dealt round-robin: at most cases-per-process each
    with ThreadPoolExecutor(args.jobs) as pool:  # threads only wait on the subprocesses
        measured = {case: m for group, ms in zip(groups, pool.map(measure, groups), strict=True)
                    for case, m in zip(group, ms, strict=True)}
    results = []
    for row in args.rows:
        _, model = build(row)
        kernel = "/".join(sorted(set(model.kernel_names)))
        for T in args.lengths:
            pred, meas = predicted(row, T), measured[(row, T)]
            # a forward too small to map a 64 KiB block adds nothing measurable: its ratio is n/a, not a division by 0
            ratio = pred / meas if meas > 0 else None
            results.append({"row": row, "length": T, "predicted": pred, "measured": meas, "ratio": ratio})
            print(f"| {row} | {ROWS[row][0]} | {kernel} | {T} | {pred / 2**20:,.1f} | {meas / 2**20:,.1f} | "
                  + ("n/a (nothing measured)" if ratio is None else f"{ratio:.2f}") + " |", flush=True)
    return results


if __name__ == "__main__":
    out = main()
    raise SystemExit(out if isinstance(out, int) else 0)
