"""Every evaluation suite, imported explicitly so the registry is greppable (`--suite NAME`).

Adding a suite: one file with an `@SUITES.register("name")` Evaluator subclass (see base.py) and its
Config dataclass, one import below, its place in ALL (or BY_NAME), and one field in config.EvalConfig.
"""

from posbench.evaluation import algorithmic, lambada, niah, ppl  # noqa: F401  (imported to register)
from posbench.evaluation.suite_registry import get_suite, suite_names

ALL = ["ppl", "algorithmic", "passkey", "niah"]  # `--suite all`, in this order (cheap and broad first)
# asked for by name only: they need data fetched beforehand (python -m posbench.evaluation.prepare_data), and
# `all` must run on a checkpoint alone
BY_NAME = ["lambada"]
if sorted(ALL + BY_NAME) != sorted(suite_names()):  # an import-time invariant, kept under python -O too
    raise RuntimeError("suites.ALL and suites.BY_NAME must list every registered suite")

__all__ = ["ALL", "BY_NAME", "get_suite", "suite_names"]
