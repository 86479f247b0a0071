"""`posbench lm-eval ...` (= `posbench-lm-eval`, `python -m posbench.interop.lm_eval_model`): EleutherAI's
lm-evaluation-harness command line with `--model posbench` registered (`pip install -e '.[lm_eval]'`).

    posbench lm-eval --model posbench --model_args checkpoint=RUN --tasks hellaswag

lm_eval 0.4.13 discovers models only through its own registry (no plugin entry points), so the model is
registered by importing posbench/interop/lm_eval_model.py before the harness parses its arguments.
"""

from __future__ import annotations

import sys

from posbench.cli.errors_cli import cli_entry


@cli_entry
def main(argv: list[str] | None = None) -> int:
    """The lm_eval command line (it reads sys.argv) with the `posbench` model registered; a posbench error
    (a damaged checkpoint: exit code 4) is one line, as in every command."""
    from lm_eval.__main__ import cli_evaluate

    import posbench.interop.lm_eval_model  # noqa: F401  (registers `--model posbench`)

    sys.argv = [sys.argv[0], *argv]
    cli_evaluate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
