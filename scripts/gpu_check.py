#!/usr/bin/env python
"""The GPU path checked in one prepared call: kernels correct on CUDA with their throughput and memory per PE
(`kernels`: first a profile of one tiny step, then every model.kernels option timed on and off), and PEs
pretrained on a carried corpus of English text and evaluated past the training length
(`pretrain`); `all` runs both under one budget. A GPU is lent rarely and for minutes, so each mode fits a
wall-clock budget (--budget-s; rows that no longer fit are skipped and say so), every row fails alone, JSON goes
under --out (default: $OUT) after each row, and the tables are printed last. Names, --out and the study are checked
before any work (gpucheck/args.py): a mistyped one is one line and exit 2.

    python scripts/gpu_check.py kernels                   # at most 9 min (--budget-s 520)
    python scripts/gpu_check.py pretrain --corpus data/gpu_corpus
    python scripts/gpu_check.py all --budget-s 560
    python scripts/gpu_check.py kernels --dry-run         # the same code on the CPU at toy sizes (a CI test)
    python scripts/gpu_check.py studies --budget-s 540    # the long-context study and sweep on cuda, packed
    python scripts/gpu_check.py studies --plan            # undecided presets at 10-20 seeds, batched, as many as fit

It imports only what the GPU machine's image has (torch, triton, transformers, pyarrow, pyyaml, tiktoken, numpy,
safetensors, pytest): wandb is disabled, posbench comes from the source tree (src/ is put on sys.path).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # posbench from the source tree

os.environ.setdefault("WANDB_MODE", "disabled")

import torch  # noqa: E402

from posbench.cli.arg_types import nonnegative_float  # noqa: E402
from posbench.cli.errors_cli import cli_entry  # noqa: E402
from posbench.gpucheck import args as arg_checks  # noqa: E402
from posbench.gpucheck import common, kernels, pretrain, studies  # noqa: E402

MODES = {"kernels": kernels, "pretrain": pretrain, "studies": studies}
# each mode's command-line check, run for every mode of the call before any work (gpucheck/args.py)
CHECKS = {"kernels": kernels.check_args, "pretrain": pretrain.check_args, "studies": arg_checks.check_studies}
# `all`: the modes it runs and the share of the budget each gets, in order (the kernels' throughput sizes
# pretrain's run); `studies` runs posbench's own commands for results, not a check of the GPU path
ALL_SHARES = {"kernels": 0.42, "pretrain": 1.0}


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=[*MODES, "all"])
    p.add_argument("--dry-run", action="store_true", help="CPU, toy sizes: the same code path in under 2 minutes")
    p.add_argument("--budget-s", type=nonnegative_float, default=0.0,
                   help="wall-clock seconds for the whole call (0: the mode's default; all: the sum)")
    p.add_argument("--out", default="", help="folder for the JSON (default: $OUT when set, else none)")
    for module in MODES.values():
        module.add_arguments(p)
    args = p.parse_args(argv)
    modes = list(ALL_SHARES) if args.mode == "all" else [args.mode]
    for name in modes:
        CHECKS[name](args)
    out = common.out_dir(args.out)
    arg_checks.check_out(out)
    if not args.dry_run and not torch.cuda.is_available():
        p.error("no CUDA device is visible: run on a GPU machine, or add --dry-run for the CPU toy run")
    total = args.budget_s or sum(MODES[m].default_budget_s(args.dry_run) for m in modes)
    common.allow_recompiles()
    budget = common.Budget(total)
    texts, failed = [], 0
    for name in modes:
        share = ALL_SHARES[name] if args.mode == "all" else 1.0
        result = MODES[name].run(args, budget.part(share), out)
        texts += result.tables
        failed += result.failed
    print(f"\n# gpu_check {args.mode}{' (dry run)' if args.dry_run else ''}: {budget.elapsed():.0f} s of "
          f"{total:.0f} s budget; {failed} row(s) failed")
    for text in texts:
        print("\n" + text)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
