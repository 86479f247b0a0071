#!/usr/bin/env python
"""Where the long_context suite's time goes at one length: per family, building the prompts (fitting each
example's units to the length in the tokenizer) and the model's greedy decoding, in wall and CPU seconds.

    python scripts/bench_long_context.py                              # 8,192 tokens, a random-init nano rope model
    python scripts/bench_long_context.py --length 2048 --n-samples 2 --depths 0.5
    python scripts/bench_long_context.py --ckpt checkpoints/rope/latest --length 8192
    python scripts/bench_long_context.py --length 4096 --no-exact-length      # prompts as fitted, unbatched

The model is the nano preset (bytes tokenizer, random weights: decoding costs the same whatever the weights)
unless --ckpt names a checkpoint. `build` is the prompts alone (`fit` for every cell); `decode` is the rest of
the grid's run (the model's forward passes over the prompts with the KV cache, then one token per step). CPU
seconds count every thread of this process.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

import torch

from posbench.cli.arg_types import fraction_list, positive_int, thread_count
from posbench.cli.errors_cli import cli_entry
from posbench.config import load_config
from posbench.data.tokenizers import ByteTokenizer
from posbench.evaluation.evaluator import NullProgress, Session, Target
from posbench.evaluation.markdown import md_table
from posbench.evaluation.suites.long_context import LongContext, LongContextConfig


def clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def model_and_target(args) -> tuple[torch.nn.Module, Target]:
    if args.ckpt:
        from posbench.data.layout import DataLayout
        from posbench.evaluation.loading import load_model

        loaded = load_model(Path(args.ckpt), torch.device("cpu"), None)
        run_cfg, model = loaded.cfg, loaded.model
        tokenizer = DataLayout.from_config(run_cfg.data).tokenizer.build()
    else:
        run_cfg = load_config(model_size="nano", pe_type=args.pe, overrides=["data.tokenizer.name=bytes"])
        from posbench.model.transformer import Transformer

        torch.manual_seed(0)
        model = Transformer(run_cfg.model, run_cfg.pe).eval()
        tokenizer = ByteTokenizer(ByteTokenizer.Config(), ".").build()
    target = Target("bench", Path("."), run_cfg, tokenizer, [args.length], 0, args.batch_size, model.pe.max_positions)
    return model, target


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--length", type=positive_int, default=8192)
    p.add_argument("--n-samples", type=positive_int, default=4)
    p.add_argument("--depths", type=fraction_list, default="0.0,0.5,1.0", help="needle depths, fractions in [0, 1]")
    p.add_argument("--pe", default="rope", help="PE of the random-init model (without --ckpt)")
    p.add_argument("--ckpt", help="a checkpoint (step directory or run directory) instead of a random nano model")
    p.add_argument("--batch-size", type=positive_int, default=8)
    p.add_argument("--threads", type=thread_count, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--no-exact-length", action="store_true",
                   help="prompts as fitted (no padding to the length): each decodes alone unless sizes happen to match")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, target = model_and_target(args)
    cfg = LongContextConfig(lengths=[args.length], n_samples=args.n_samples, filler="task",
                            exact_length=not args.no_exact_length,
                            depths=args.depths)
    suite = LongContext(cfg, target)
    session = Session(model, torch.device("cpu"), contextlib.nullcontext, NullProgress())
    rows, totals = [], [0.0] * 4
    for name, grid in suite.grids.items():
        w0, c0 = clock()
        fitted = [grid.fit(i, args.length, d) for d in grid.cfg.depths for i in range(cfg.n_samples)]
        w1, c1 = clock()
        grid.run(session)  # fits again, then decodes: decode = run - build
        w2, c2 = clock()
        build, run = (w1 - w0, c1 - c0), (w2 - w1, c2 - c1)
        decode = (run[0] - build[0], run[1] - build[1])
        tokens = [len(f[0]) + f[2] for f in fitted if f is not None]
        rows.append([name, str(len(fitted)), f"{sum(tokens) / max(1, len(tokens)):,.0f}",
                     f"{build[0]:.1f} / {build[1]:.1f}", f"{decode[0]:.1f} / {decode[1]:.1f}",
                     f"{run[0]:.1f} / {run[1]:.1f}"])
        totals = [t + x for t, x in zip(totals, (*build, *run), strict=True)]
    rows.append(["all", "", "", f"{totals[0]:.1f} / {totals[1]:.1f}", f"{totals[2] - totals[0]:.1f} / "
                 f"{totals[3] - totals[1]:.1f}", f"{totals[2]:.1f} / {totals[3]:.1f}"])
    print(f"long_context at {args.length:,} tokens, {cfg.n_samples} prompts per cell, depths {cfg.depths}, "
          f"exact_length {cfg.exact_length}, batch size {args.batch_size}; "
          f"{torch.get_num_threads()} torch threads; seconds wall / CPU")
    print(md_table(["family", "prompts", "tokens (mean)", "build", "decode", "suite (build + decode)"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
