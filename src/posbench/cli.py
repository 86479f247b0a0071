"""Shared command-line parsing: YAML files and dotted overrides as positionals, familiar flags."""

from __future__ import annotations

import argparse

from posbench.cli_errors import cli_entry
from posbench.config import RunConfig, load_config
from posbench.config_loader import ConfigError, nested

# main_train's own flags -> the config field each one sets (after every positional, as before)
TRAIN_FLAGS = {"resume": "train.resume", "branch_from": "train.branch_from", "budget": "train.budget"}


def config_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("sources", nargs="*", metavar="FILE.yaml | key.sub=value",
                   help="YAML presets merged left to right, then dotted overrides")
    p.add_argument("--model-size", help="model preset: nano, tiny, small, medium, large")
    p.add_argument("--pe-type", help="positional encoding (see --list-pe-types); sets pe.name")
    return p


def config_from_args(args: argparse.Namespace, flags: list[dict] = ()) -> RunConfig:
    """Positionals are YAML files and dotted text (parsed once, in the loader); `flags` are mappings of
    the values argparse already holds, applied last, as they are."""
    files = [s for s in args.sources if "=" not in s]
    overrides = [s for s in args.sources if "=" in s]
    return load_config(files, overrides + list(flags), model_size=args.model_size, pe_type=args.pe_type)


def list_pe_types() -> str:
    from posbench.pe import PES

    rows = sorted(PES.classes().items())
    width = max(len(n) for n, _ in rows)
    lines = [f"{name:<{width}}  {cls.kind:<8}  {cls.summary}" for name, cls in rows]
    return "\n".join(lines + [f"({len(rows)} positional encodings)"])


def build_stream(cfg: RunConfig):
    """The BatchSource the training loop reads (training/batch_sources.py)."""
    if cfg.train.stream == "random":
        from posbench.training.batch_sources import RandomTokens

        return RandomTokens(cfg.model.vocab_size, cfg.model.seq_len, cfg.seed)
    from posbench.data.loader import build_batch_source

    source = build_batch_source(cfg.data, cfg.model.seq_len)
    if source.train.vocab_size > cfg.model.vocab_size:
        raise ConfigError(f"the token shards use a vocabulary of {source.train.vocab_size} but model.vocab_size "
                          f"is {cfg.model.vocab_size}; set model.vocab_size={source.train.vocab_size}")
    return source


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
    from posbench.training import distributed as dist
    from posbench.training.loop import train

    # Errors become one line and a documented exit code in cli_errors.cli_entry.
    try:
        cfg = config_from_args(args, flags)
        if args.print_config:
            print(cfg.to_yaml(), end="")
            return 0
        train(cfg, build_stream(cfg))
    finally:
        dist.shutdown()
    return 0
