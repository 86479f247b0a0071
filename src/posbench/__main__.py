"""`python -m posbench COMMAND ...`: the checkout's scripts for an installed package (wheel, `pip install .`).

    python -m posbench train --model-size nano --pe-type rope train.steps=10
    python -m posbench eval runs/nano_rope/latest --suite ppl
    python -m posbench data info configs/data/local_example.yaml
"""

from __future__ import annotations

import importlib
import sys

# command -> (module, function): imported on demand so `data` does not pay for torch.
COMMANDS = {
    "train": ("posbench.cli", "main_train", "pretrain a model (train.py)"),
    "eval": ("posbench.evaluation.eval_cli", "main_eval", "evaluate checkpoints (eval.py)"),
    "data": ("posbench.data.prepare_fineweb", "main", "download, tokenize, describe a corpus (prepare_fineweb)"),
}


def usage() -> str:
    rows = "\n".join(f"  {name:<6} {help_}" for name, (_, _, help_) in COMMANDS.items())
    return f"usage: python -m posbench COMMAND [args...]\n\ncommands:\n{rows}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"error: unknown command `{argv[0]}`; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module, func, _ = COMMANDS[argv[0]]
    return getattr(importlib.import_module(module), func)(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
