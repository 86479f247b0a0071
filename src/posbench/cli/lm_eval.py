"""`posbench lm-eval ...` (= `posbench-lm-eval`): EleutherAI's lm-evaluation-harness command line with
`--model posbench` registered (`pip install -e '.[lm_eval]'`).

    posbench data download-eval lambada      # once, online: LAMBADA's test file, verified, under data/raw/
    posbench lm-eval --model posbench --model_args pretrained=checkpoints/RUN \\
        --include_path configs/lm_eval --tasks lambada_local --output_path runs/lm_eval

lm_eval 0.4.13 discovers models only through its own registry (no plugin entry points), so the model is
registered by importing posbench/interop/lm_eval_model.py before the harness parses its arguments. With
`--model posbench` the checkpoint is loaded (and so checked) first, then handed to the model the harness builds: a
missing or damaged checkpoint is refused before the harness spends seconds indexing its tasks.

A task whose dataset lives on the Hugging Face Hub (`--tasks lambada_openai`) cannot load without the network
(or with HF_HUB_OFFLINE=1); `datasets` then raises ConnectionError deep in the harness. That one error becomes
a one-line `error:` naming the offline way (exit 2, the traceback with --debug); every other error of the
harness keeps its own traceback. `python -m posbench.interop.lm_eval_model` is the bare harness command line.
"""

from __future__ import annotations

import os
import re
import sys

from posbench.cli.errors_cli import cli_entry
from posbench.errors import DataError

# datasets' words when a dataset's files cannot be fetched from the Hub (datasets 4-5: load.py)
HUB_UNREACHABLE = re.compile(r"Couldn't reach (?:the Hugging Face Hub for dataset )?'([^']+)'")
OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def offline_error(err: ConnectionError) -> DataError | None:
    """The one-line error for a task dataset the Hub cannot serve here, or None for any other ConnectionError."""
    hit = HUB_UNREACHABLE.search(str(err))
    if not hit:
        return None
    set_vars = [v for v in OFFLINE_VARS if os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")]
    why = f"{' and '.join(set_vars)} set" if set_vars else "no network"
    return DataError(f"lm_eval: a task's dataset `{hit.group(1)}` is on the Hugging Face Hub, which this run cannot "
                     f"reach ({why}). Offline, give the harness a task over local files with --include_path: "
                     "LAMBADA, once `posbench data download-eval lambada` has cached it, is `--include_path "
                     "configs/lm_eval --tasks lambada_local` (from the repository root; docs/guide.md, "
                     "'Use a checkpoint elsewhere')")


def harness_model_args(argv: list[str]) -> tuple[str | None, dict, str | None]:
    """(--model, --model_args as the harness merges them, --device) read from the harness's command line, with
    the harness's own action for model_args; anything else on the line is the harness's to parse and check."""
    import argparse

    from lm_eval._cli.utils import MergeDictAction

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--model", "-M")
    parser.add_argument("--model_args", "-a", nargs="+", action=MergeDictAction)
    parser.add_argument("--device")
    try:
        args, _ = parser.parse_known_args(argv)
    except (SystemExit, ValueError):  # a line the harness will refuse with its own message
        return None, {}, None
    return args.model, args.model_args or {}, args.device


@cli_entry
def main(argv: list[str] | None = None) -> int:
    """The lm_eval command line (it reads sys.argv) with the `posbench` model registered; a posbench error
    (a damaged checkpoint: exit code 4) is one line, as in every command, and comes before the harness's work."""
    from lm_eval.__main__ import cli_evaluate

    import posbench.interop.lm_eval_model  # registers `--model posbench`

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    model, model_args, device = harness_model_args(sys.argv[1:])
    if model == "posbench":  # its checkpoint checked (and loaded once) before the harness's seconds of task indexing
        posbench.interop.lm_eval_model.preload(model_args, device)
    try:
        cli_evaluate()
    except ConnectionError as e:
        error = offline_error(e)
        if error is None:
            raise
        raise error from e
    return 0


if __name__ == "__main__":
    sys.exit(main())
