"""Evaluation of checkpoints (`posbench eval`, eval.py): perplexity vs length, algorithmic tasks, passkey,
needle-in-a-haystack, the long-context families and LAMBADA, one suite per module of the package `suites/`
(registered in suite_registry.SUITES); eval_runner.run_eval plans every checkpoint, then runs the suites.

Kept import-light on purpose: `posbench.evaluation.loading` is used by other layers (the export, lm-eval, the
app) without pulling in plotting or the suites.
"""
