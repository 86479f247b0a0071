"""Every evaluation suite (`--suite NAME`): each module of this package registers one with `@SUITES.register`.

Adding a suite touches its own file (and its test) only: a module here with an `@SUITES.register("name")`
Evaluator subclass (see evaluation/evaluator.py) whose `options` is its config dataclass. Importing this
package imports every module in it (posbench.registry.import_members), so the registry holds them all;
eval_config.EvalConfig gets one field per suite from the registry; `--suite all` runs the suites with `in_all` in
their `order`.
"""

from posbench.evaluation.suite_registry import SUITES, get_suite, suite_names
from posbench.registry import import_members, load_plugins

import_members(__name__, __path__)
load_plugins("posbench_suites")  # variants from installed plug-in packages and --plugin (posbench/registry.py)

# `--suite all`, cheap and broad first. The others are asked for by name only (lambada needs data fetched
# beforehand, and `all` must run on a checkpoint alone).
ALL = [name for name in sorted(SUITES, key=lambda n: SUITES[n].order) if SUITES[name].in_all]
BY_NAME = [name for name in sorted(SUITES, key=lambda n: SUITES[n].order) if not SUITES[name].in_all]

__all__ = ["ALL", "BY_NAME", "SUITES", "get_suite", "suite_names"]
