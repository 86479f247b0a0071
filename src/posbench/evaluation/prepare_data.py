"""Shim: `python -m posbench.evaluation.prepare_data` = `posbench data download-eval` (posbench/cli/data.py);
the evaluation sets themselves are `posbench.evaluation.eval_sets`."""

if __name__ == "__main__":
    from posbench.cli.data import main_eval_sets

    raise SystemExit(main_eval_sets())
