"""Per-size lr, batch and warmup from one tuned size (rule: posbench/training/hparam_scaling.py).

    python scripts/scale_hyperparams.py                              # the presets' values from the tiny anchor
    python scripts/scale_hyperparams.py --anchor small --lr 6e-4 --batch-tokens 524288 --warmup-steps 167
    python scripts/scale_hyperparams.py --check                      # exit 1 if configs/model/*.yaml disagree

Prints a table and, per size, the dotted overrides to paste after `train.py --model-size <size>`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from posbench.cli.errors_cli import cli_entry  # noqa: E402
from posbench.training.hparam_scaling import Anchor, derive, mismatches  # noqa: E402

SIZES = ["tiny", "small", "medium", "large"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = Anchor()
    p.add_argument("--anchor", default=default.size, help="the tuned size (a configs/model preset)")
    p.add_argument("--lr", type=float, default=default.lr, help="its tuned peak lr")
    p.add_argument("--batch-tokens", type=int, default=default.batch_tokens, help="its tokens per step")
    p.add_argument("--warmup-steps", type=int, default=default.warmup_steps, help="its warmup in steps")
    p.add_argument("--sizes", nargs="+", default=SIZES)
    p.add_argument("--check", action="store_true", help="compare the presets with the rule; exit 1 on a difference")
    args = p.parse_args(argv)
    anchor = Anchor(args.anchor, args.lr, args.batch_tokens, args.warmup_steps)
    if args.check:
        bad = [m for size in args.sizes for m in mismatches(size, anchor)]
        print("\n".join(bad) if bad else "presets agree with the rule")
        return 1 if bad else 0
    print(f"{'size':<8}{'params':>15}{'lr':>10}{'tokens/step':>13}{'warmup tokens':>15}")
    rows = [derive(size, anchor) for size in args.sizes]
    for d in rows:
        print(f"{d.size:<8}{d.params:>15,}{d.lr:>10.2e}{d.global_batch_tokens:>13,}{d.warmup_tokens:>15,}")
    for d in rows:
        print(f"{d.size}: optim.lr={d.lr:g} train.global_batch_tokens={d.global_batch_tokens} "
              f"schedule.warmup_tokens={d.warmup_tokens}")
    return 0


if __name__ == "__main__":
    sys.exit(cli_entry(main)())
