#!/usr/bin/env python
"""Evaluation time and peak memory per PE family and length, the eager attention kernel against sdpa_bias.

    python scripts/bench_eval.py                                   # nano, ppl at 1,024-8,192, algorithmic, passkey
    python scripts/bench_eval.py --lengths 1024 2048 --ppl-tokens 4096 --pes rope alibi   # a quick look
    python scripts/bench_eval.py --json bench_eval.json
    python scripts/bench_eval.py --pes rope fire --no-eager --algorithmic '' --passkey-lengths   # no eager runs

A nano model (configs/model/nano.yaml: d_model 64, 2 layers, 4 heads) with random weights per PE, evaluated in
this process on CPU through the suites' own classes (no checkpoint, no data download): perplexity on random-word
text (bytes tokenizer) at each length, one algorithmic task (greedy decoding with the KV cache, ID and OOD) and a
passkey grid (a prompt of each --passkey-lengths through the cache). A bias PE runs each cell twice, with
model.attention=eager (before: explicit softmax over (B, H, T, S) tensors) and with CPU's automatic choice
sdpa_bias (after: SDPA with the bias as a float mask, a block of queries at a time, or for a bias affine in the
distance past a near band, ALiBi, T5 and relative_learned, the far keys with no mask at all: model/far_field.py);
RoPE and NoPE run SDPA.
The two kernels of a cell alternate (their order flips every repeat), so on a shared machine the before/after
ratio of a row is measured side by side; the "x rope" columns divide by RoPE's time for the same cell, taken in
the same pass. The best of --repeats is reported.

Memory: "peak MiB" is the resident set's high-water mark during the cell above the resident set before it
(`/proc/self/clear_refs` = 5 resets the mark), measured afterwards in a second process that runs every cell once
with glibc's mmap threshold fixed at 64 KiB (MALLOC_MMAP_THRESHOLD_), so freed tensors leave the resident set.
Timings come from the first process, with the allocator's defaults: under that threshold every large tensor is a
fresh mapping faulted in page by page, which would time the allocator rather than the kernels. Linux only;
elsewhere, or with --no-memory, n/a.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from posbench.cli.arg_types import positive_int, positive_thread_count
from posbench.cli.errors_cli import cli_entry

ROOT = Path(__file__).resolve().parents[1]
PES = ["rope", "none", "alibi", "t5", "kerple_log", "fire"]
WORDS = ("the of and to in is was for on that with as by at from his an were are which this be river city "
         "number system theory garden window letter bridge").split()


def _status_kib(field: str) -> int | None:
    try:
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def measured(fn, memory: bool) -> tuple[float, float | None]:
    """(seconds, peak MiB above the resident set before, when `memory`) of fn()."""
    before = None
    if memory:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            before = _status_kib("VmRSS")
        except OSError:
            before = None
    t0 = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t0
    peak = _status_kib("VmHWM") if before is not None else None
    return seconds, (peak - before) / 1024 if peak is not None else None


def build(pe: str, attention: str):
    import torch

    from posbench.config import load_config
    from posbench.model.transformer import Transformer

    cfg = load_config([str(ROOT / "configs/model/nano.yaml")], overrides=[f"model.attention={attention}"],
                      pe_type=pe)
    torch.manual_seed(0)
    return Transformer(cfg.model, cfg.pe).eval(), cfg


def cells(cfg, args, text: Path):
    """(name, evaluator) of every cell, planned (data loaded, prompts' tasks built) before any timing."""
    from posbench.data.tasks import get_task_class
    from posbench.data.tokenizers import ByteTokenizer
    from posbench.evaluation.evaluator import Target
    from posbench.evaluation.ppl_data import TextFiles
    from posbench.evaluation.suites.algorithmic import Algorithmic, AlgorithmicConfig
    from posbench.evaluation.suites.passkey_eval import PasskeyConfig, PasskeyGrid
    from posbench.evaluation.suites.ppl import Perplexity, PplConfig

    tok = ByteTokenizer(ByteTokenizer.Config(), ".").build()
    target = lambda lengths: Target("bench", Path("."), cfg, tok, sorted(lengths), 0, args.batch_size)
    out = []
    for L in args.lengths:
        ppl = PplConfig(data=TextFiles.Config(paths=[str(text)]), protocols=args.protocols, max_tokens=args.ppl_tokens)
        out.append((f"ppl {L}", Perplexity(ppl, target([L]))))
    if args.algorithmic:
        task = get_task_class(args.algorithmic).Config()
        alg = AlgorithmicConfig(tasks=[task], shots=[0], n_examples=args.examples)
        out.append((f"{args.algorithmic} id+ood", Algorithmic(alg, target([cfg.model.seq_len]))))
    if args.passkey_lengths:
        grid = PasskeyConfig(lengths=args.passkey_lengths, depths=[0.0, 0.5, 1.0], n_samples=args.examples // 4 or 1,
                             filler="task")
        out.append((f"passkey {'/'.join(map(str, args.passkey_lengths))}",
                    PasskeyGrid(grid, target(args.passkey_lengths))))
    return out


def variants(pes: list[str], eager: bool = True) -> list[tuple[str, str, object, object]]:
    """(pe, attention, model, run config) of every model measured: each PE with CPU's automatic kernel, and a bias PE
    also with model.attention=eager on the same weights (unless not `eager`)."""
    out = []
    for pe in pes:
        model, cfg = build(pe, "auto")
        out.append((pe, "auto", model, cfg))
        if eager and model.pe.has_score_mod:
            eager, _ = build(pe, "eager")
            eager.load_state_dict(model.state_dict())
            out.append((pe, "eager", eager, cfg))
    return out


def run_all(args, text: Path) -> list[dict]:
    """Rows (pe, cell, kernel, best seconds, peak MiB). Every model runs a cell before the next cell starts, in an
    order that rotates with the cell and the repeat, so RoPE's time and both kernels of a bias PE are taken
    side by side on a shared machine."""
    import torch

    from posbench.evaluation.evaluator import NullProgress, Session

    models = variants(args.pes, not args.no_eager)
    planned = [cells(cfg, args, text) for _, _, _, cfg in models]  # per model: its evaluators, same cells
    names = [name for name, _ in planned[0]]
    best: dict[tuple[int, str], tuple[float, float | None]] = {}
    turn = 0
    for _ in range(args.repeats):
        for c, name in enumerate(names):
            order = list(range(len(models)))
            turn += 1
            order = order[turn % len(order):] + order[:turn % len(order)]
            for i in order:
                pe, attention, model, _ = models[i]
                session = Session(model, torch.device("cpu"), contextlib.nullcontext, NullProgress())
                seconds, peak = measured(functools.partial(planned[i][c][1].run, session), args.memory_child)
                old = best.get((i, name))
                best[(i, name)] = (min(seconds, old[0]) if old else seconds, peak if old is None else old[1])
                if not args.memory_child:
                    print(f"  {pe:<11} {name:<22} {attention:<6} {seconds:8.2f} s", file=sys.stderr, flush=True)
    return [{"pe": pe, "cell": name, "kernel": model.blocks[0].attn.kernel.name, "before": attention == "eager",
             "seconds": best[(i, name)][0], "peak_mib": best[(i, name)][1]}
            for name in names for i, (pe, attention, model, _) in enumerate(models)]


def memory_pass(argv) -> dict:
    """{(pe, cell, kernel): peak MiB} from a second process under a 64 KiB mmap threshold (see the module doc)."""
    import subprocess

    argv = [a for a in (argv if argv is not None else sys.argv[1:])]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    out = subprocess.run([sys.executable, __file__, *argv, "--repeats", "1", "--memory-child"], env=env, check=True,
                         capture_output=True, text=True).stdout
    return {(r["pe"], r["cell"], r["kernel"]): r["peak_mib"] for r in json.loads(out.strip().splitlines()[-1])}


def table(rows: list[dict]) -> str:
    """Markdown: one line per PE and cell; before (eager) and after, each with its ratio to RoPE."""
    rope = {r["cell"]: r["seconds"] for r in rows if r["pe"] == "rope"}
    by = {(r["pe"], r["cell"], r["before"]): r for r in rows}
    fmt_mib = lambda v: "n/a" if v is None else f"{v:,.0f}"
    x_rope = lambda r: f"{r['seconds'] / rope[r['cell']]:.2f}x" if r["cell"] in rope else "n/a"
    lines = ["| PE | cell | before s (eager) | x rope | peak MiB | after s | kernel | x rope | peak MiB | "
             "after / before |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (pe, cell, before), r in by.items():
        if before:
            continue
        old = by.get((pe, cell, True))
        cells_before = [f"{old['seconds']:.2f}", x_rope(old), fmt_mib(old["peak_mib"])] if old else ["-", "-", "-"]
        speed = f"{r['seconds'] / old['seconds']:.2f}" if old else "-"
        lines.append(f"| {pe} | {cell} | " + " | ".join(cells_before) +
                     f" | {r['seconds']:.2f} | {r['kernel']} | {x_rope(r)} | {fmt_mib(r['peak_mib'])} | {speed} |")
    return "\n".join(lines)


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pes", nargs="+", default=PES)
    p.add_argument("--lengths", type=positive_int, nargs="+", default=[1024, 2048, 4096, 8192],
                   help="perplexity lengths")
    p.add_argument("--ppl-tokens", type=positive_int, default=16384, help="tokens scored per length (ppl.max_tokens)")
    p.add_argument("--protocols", nargs="+", default=["nonoverlap"], choices=["nonoverlap", "sliding"])
    p.add_argument("--algorithmic", default="copy_distance", help="one algorithmic task ('' = none)")
    p.add_argument("--passkey-lengths", type=positive_int, nargs="*", default=[1024, 4096], help="(none = no passkey)")
    p.add_argument("--examples", type=positive_int, default=16,
                   help="algorithmic examples per split; passkey: a quarter")
    p.add_argument("--batch-size", type=positive_int, default=8, help="eval.py's --batch-size")
    p.add_argument("--repeats", type=positive_int, default=1)
    p.add_argument("--threads", type=positive_thread_count, default=1,
                   help="torch threads (1: steadier on a shared machine)")
    p.add_argument("--json", default="", help="write the rows here too")
    p.add_argument("--no-memory", action="store_true", help="skip the memory pass")
    p.add_argument("--no-eager", action="store_true",
                   help="time CPU's automatic kernel only (no 'before' columns: eager's T x S tensors are slow "
                        "at 8,192)")
    p.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    from posbench.pe import PES as REGISTERED

    unknown = [name for name in args.pes if name not in REGISTERED.names()]
    if unknown:  # before any model is built: a typo is a usage error, not a traceback
        p.error(f"unknown PE {', '.join(unknown)}; registered: {', '.join(sorted(REGISTERED.names()))}")
    if args.json and not Path(args.json).parent.is_dir():  # before the timing pass, not after it
        p.error(f"--json {args.json}: its folder {Path(args.json).parent} does not exist")
    import torch

    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "words.txt"
        need = max(args.lengths) * max(1, args.ppl_tokens // max(args.lengths)) + args.ppl_tokens + 1
        text.write_text(" ".join(rng.choice(WORDS) for _ in range(need // 4 + 1000)))  # ~5 bytes a word
        t0 = time.perf_counter()
        rows = run_all(args, text)
        wall = time.perf_counter() - t0
    if args.memory_child:
        print(json.dumps(rows))
        return 0
    peaks = memory_pass(argv) if not args.no_memory and sys.platform.startswith("linux") else {}
    for r in rows:
        r["peak_mib"] = peaks.get((r["pe"], r["cell"], r["kernel"]))
    cell_order = list(dict.fromkeys(r["cell"] for r in rows))
    rows.sort(key=lambda r: (args.pes.index(r["pe"]), cell_order.index(r["cell"])))
    print(f"nano (d_model 64, 2 layers, 4 heads), random weights, CPU fp32, {args.threads} thread(s); "
          f"ppl {'+'.join(args.protocols)} over {args.ppl_tokens:,} tokens per length; best of {args.repeats}; "
          f"timing pass {wall:.0f} s")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
