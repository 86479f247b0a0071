"""The evaluation suites' registry (`--suite NAME`): each suite registers itself with `@SUITES.register`
in its own file; `suites.py` imports them all (and lists the order of `--suite all`)."""

from __future__ import annotations

from posbench.config_loader import ConfigError, nearest
from posbench.evaluation.evaluator import Evaluator
from posbench.registry import Registry


def _check(name: str, cls) -> None:
    if not cls.title:
        raise TypeError(f"{cls.__name__} needs a `title`")


SUITES = Registry("suite", _check)


def get_suite(name: str) -> type[Evaluator]:
    if name not in SUITES:  # `all` is a name too (suites.ALL), so the nearest-name list includes it
        raise ConfigError(f"unknown suite `{name}`" + nearest(name, [*SUITES, "all"]))
    return SUITES[name]


def suite_names() -> list[str]:
    return list(SUITES)
