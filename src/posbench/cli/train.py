"""`posbench train` / train.py: pretrain a model from YAML presets, dotted overrides and familiar flags.

    posbench train --list-pe-types
    posbench train --model-size tiny --pe-type rope --print-config
    posbench train configs/model/nano.yaml pe.name=alibi model.dropout=0.1 --print-config
"""

from __future__ import annotations

from posbench.cli.errors_cli import cli_entry
from posbench.config import config_from_args, config_parser
from posbench.config_loader import nested

# main_train's own flags -> the config field each one sets (applied after every positional override)
TRAIN_FLAGS = {"resume": "train.resume", "branch_from": "train.branch_from", "budget": "train.budget"}


# Families in the order a reader meets them; a kind not listed here still prints, after these.
FAMILY_TITLES = {"none": "no position information", "absolute": "added to the token embeddings",
                 "rotary": "rotating queries and keys", "bias": "biasing attention logits",
                 "context": "positions counted from the content", "hybrid": "per-layer mixtures",
                 "wrapper": "wrappers around another PE"}


def list_pe_types() -> str:
    """Every registered PE grouped by family (its `kind`), one line each with what it claims."""
    from posbench.pe import PES

    rows = sorted(PES.classes().items())
    width = max(len(n) for n, _ in rows)
    kinds = list(FAMILY_TITLES) + sorted({cls.kind for _, cls in rows} - set(FAMILY_TITLES))
    lines = []
    for kind in kinds:
        members = [(n, cls) for n, cls in rows if cls.kind == kind]
        if members:
            lines += [f"{kind}: {FAMILY_TITLES.get(kind, kind)}"]
            lines += [f"  {name:<{width}}  {cls.summary}" for name, cls in members] + [""]
    return "\n".join(lines + [f"({len(rows)} positional encodings)"])


@cli_entry
def main_train(argv: list[str] | None = None) -> int:
    p = config_parser("Pretrain a decoder-only LM with a chosen positional encoding.")
    p.add_argument("--list-pe-types", action="store_true", help="print every registered PE and exit")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("--resume", help="`auto` (latest valid checkpoint of this run) or a checkpoint path")
    p.add_argument("--branch-from", help="branch checkpoint to run one budget's decay from")
    p.add_argument("--budget", help="with --branch-from: the budget, in train.budget_unit")
    args = p.parse_intermixed_args(argv)
    if args.list_pe_types:
        print(list_pe_types())
        return 0
    # each flag's value goes to its field as the string argparse read; the strict loader types it
    # (`--budget 2.5e9` -> 2.5e9), so a bad value fails with the same message as `train.budget=...`
    flags = [nested(key, getattr(args, flag)) for flag, key in TRAIN_FLAGS.items() if getattr(args, flag)]
    from posbench.data.hints import config_args, data_sources
    from posbench.training import distributed as dist
    from posbench.training.batch_sources import build_stream
    from posbench.training.loop import train

    # Errors become one line and a documented exit code in errors_cli.cli_entry; a missing shard's hint
    # names `posbench data tokenize` with this command's YAML files and data.* overrides.
    try:
        cfg = config_from_args(args, flags)
        if args.print_config:
            print(cfg.to_yaml(), end="")
            return 0
        with config_args(data_sources(args.sources)):
            train(cfg, build_stream(cfg))
    finally:
        dist.shutdown()
    return 0


main = main_train
