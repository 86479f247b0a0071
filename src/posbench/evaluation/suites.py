"""Every evaluation suite, imported explicitly so the registry is greppable (`--suite NAME`).

Adding a suite: one file with an `@register_suite("name")` Evaluator subclass (see base.py) and its
Config dataclass, one import below, its place in ALL, and one field in config.EvalConfig.
"""

from posbench.evaluation import algorithmic, niah, passkey, ppl  # noqa: F401  (imported to register)
from posbench.evaluation.base import get_suite, suite_names

ALL = ["ppl", "algorithmic", "passkey", "niah"]  # `--suite all`, in this order (cheap and broad first)
if sorted(ALL) != sorted(suite_names()):  # an import-time invariant, kept under python -O too
    raise RuntimeError("suites.ALL must list every registered suite")

__all__ = ["ALL", "get_suite", "suite_names"]
