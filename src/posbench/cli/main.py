"""`posbench VERB ...` (console script) and `python -m posbench VERB ...`: every command of the project.

    posbench train --model-size nano --pe-type rope train.steps=10
    posbench eval runs/nano_rope/latest --suite ppl
    posbench data info configs/data/local_example.yaml
    posbench study quickstart
    posbench sweep cpu_demo --emit slurm

Each verb is one thin module of posbench/cli/ (argument parsing over library functions), imported on demand
so `data` does not pay for torch. The checkout's train.py, eval.py and scripts/{study,sweep,export_hf}.py are
shims over the same modules.
"""

from __future__ import annotations

import importlib
import sys

# verb -> (module of posbench/cli, what it does); each module has `main(argv)`
VERBS = {
    "train": ("posbench.cli.train", "pretrain a model (train.py)"),
    "eval": ("posbench.cli.eval", "evaluate checkpoints (eval.py)"),
    "data": ("posbench.cli.data", "download, tokenize, describe a corpus; fetch the evaluation sets (prepare_fineweb)"),
    "study": ("posbench.cli.study", "a PE study on synthetic tasks (scripts/study.py)"),
    "sweep": ("posbench.cli.sweep", "pretrain, evaluate and compare a sweep (scripts/sweep.py)"),
    "export": ("posbench.cli.export", "a checkpoint as a transformers directory (scripts/export_hf.py)"),
    "app": ("posbench.cli.app", "the Streamlit app (posbench-app)"),
    "lm-eval": ("posbench.cli.lm_eval", "lm-evaluation-harness with --model posbench (posbench-lm-eval)"),
    "results": ("posbench.cli.results", "render published results' pages from their data (results/<name>/)"),
}


def usage(prog: str) -> str:
    width = max(map(len, VERBS))
    rows = "\n".join(f"  {name:<{width}} {help_}" for name, (_, help_) in VERBS.items())
    return f"usage: {prog} COMMAND [args...]\n\ncommands:\n{rows}\n\n`{prog} COMMAND --help` for its options"


def main(argv: list[str] | None = None, prog: str = "posbench") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(prog))
        return 0 if argv else 2
    if argv[0] not in VERBS:
        print(f"error: unknown command `{argv[0]}`; choose one of {', '.join(VERBS)}", file=sys.stderr)
        return 2
    module, _ = VERBS[argv[0]]
    sys.argv = [f"{prog} {argv[0]}", *argv[1:]]  # argparse's default prog: `usage: posbench train ...`
    return importlib.import_module(module).main(argv[1:]) or 0
