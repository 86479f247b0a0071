"""The evaluation suites' registry (`--suite NAME`): each suite registers itself with `@SUITES.register`
in its own module of `evaluation/suites/`, which imports them all (and derives the order of `--suite all`)."""

from __future__ import annotations

import dataclasses

from posbench.config_loader import nearest
from posbench.errors import ConfigError
from posbench.evaluation.evaluator import Evaluator
from posbench.registry import Registry


def _check(name: str, cls) -> None:
    if not cls.title:
        raise TypeError(f"{cls.__name__} needs a `title`")
    if not dataclasses.is_dataclass(getattr(cls, "options", None)):
        raise TypeError(f"{cls.__name__} needs `options`, its config dataclass (EvalConfig's `{name}` field)")


SUITES = Registry("suite", _check)


def get_suite(name: str) -> type[Evaluator]:
    if name not in SUITES:  # `all` is a name too (suites.ALL), so the nearest-name list includes it
        raise ConfigError(f"unknown suite `{name}`" + nearest(name, [*SUITES, "all"]))
    return SUITES[name]


def suite_names() -> list[str]:
    return list(SUITES)
