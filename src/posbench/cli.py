"""Shared command-line parsing: YAML files and dotted overrides as positionals, familiar flags."""

from __future__ import annotations

import argparse
import sys

from posbench.config import RunConfig, load_config
from posbench.config_loader import ConfigError


def config_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("sources", nargs="*", metavar="FILE.yaml | key.sub=value",
                   help="YAML presets merged left to right, then dotted overrides")
    p.add_argument("--model-size", help="model preset: nano, tiny, small, medium, large")
    p.add_argument("--pe-type", help="positional encoding (see --list-pe-types); sets pe.name")
    return p


def config_from_args(args: argparse.Namespace) -> RunConfig:
    files = [s for s in args.sources if "=" not in s]
    overrides = [s for s in args.sources if "=" in s]
    return load_config(files, overrides, model_size=args.model_size, pe_type=args.pe_type)


def list_pe_types() -> str:
    from posbench.pe import pe_classes

    rows = sorted(pe_classes().items())
    width = max(len(n) for n, _ in rows)
    lines = [f"{name:<{width}}  {cls.kind:<8}  {cls.summary}" for name, cls in rows]
    return "\n".join(lines + [f"({len(rows)} positional encodings)"])


def main_train(argv: list[str] | None = None) -> int:
    p = config_parser("Pretrain a decoder-only LM with a chosen positional encoding.")
    p.add_argument("--list-pe-types", action="store_true", help="print every registered PE and exit")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    args = p.parse_args(argv)
    if args.list_pe_types:
        print(list_pe_types())
        return 0
    try:
        cfg = config_from_args(args)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        print(cfg.to_yaml(), end="")
        return 0
    print("The training loop is not part of this release yet; use --print-config to check a config.",
          file=sys.stderr)
    return 2
