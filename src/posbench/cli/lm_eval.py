"""`posbench lm-eval ...` (= `posbench-lm-eval`, `python -m posbench.interop.lm_eval_model`): EleutherAI's
lm-evaluation-harness command line with `--model posbench` registered (`pip install -e '.[lm_eval]'`).

    posbench lm-eval --model posbench --model_args checkpoint=RUN --tasks hellaswag

lm_eval 0.4.13 discovers models only through its own registry (no plugin entry points), so the model is
registered by importing posbench/interop/lm_eval_model.py before the harness parses its arguments.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """The lm_eval command line (it reads sys.argv) with the `posbench` model registered."""
    from lm_eval.__main__ import cli_evaluate

    import posbench.interop.lm_eval_model  # noqa: F401  (registers `--model posbench`)

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    cli_evaluate()


if __name__ == "__main__":
    main()
