"""Evaluators: perplexity vs length, algorithmic tasks, passkey, needle-in-a-haystack (eval.py).

Kept import-light on purpose: `posbench.evaluation.loading` is used by other stages (studies) without
pulling in plotting. The suites are registered in the package `suites/`.
"""
