"""One explicit, greppable registry type for every family of small classes (PEs, tasks, data
sources, tokenizers): `@REGISTRY.register("name")` in the class's own file, lookups that fail with
the nearest valid name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from posbench.config_loader import ConfigError, nearest


def declared_name(config_cls) -> str | None:
    """The default of a Config dataclass's `name` field, read without instantiating it."""
    return next((f.default for f in dataclasses.fields(config_cls) if f.name == "name"), None)


class Registry:
    def __init__(self, kind: str, check: Callable[[str, type], None] | None = None):
        self.kind = kind  # "positional encoding", "task", ... for messages
        self._classes: dict[str, type] = {}
        self._check = check

    def register(self, name: str):
        def wrap(cls):
            if name in self._classes:
                raise RuntimeError(f"{self.kind} `{name}` registered twice ({self._classes[name]} and {cls})")
            config = getattr(cls, "Config", None)
            if config is not None and declared_name(config) != name:
                raise TypeError(f"{cls.__name__}.Config must declare `name: str = \"{name}\"`")
            if self._check:
                self._check(name, cls)
            cls.name = name
            self._classes[name] = cls
            return cls

        return wrap

    def get(self, name: str, where: str, hint: str = "") -> type:
        if name not in self._classes:
            raise ConfigError(f"unknown {self.kind} `{name}` at {where}" + nearest(name, self._classes) + hint)
        return self._classes[name]

    def names(self) -> list[str]:
        return sorted(self._classes)

    def classes(self) -> dict[str, type]:
        return dict(self._classes)

    def __contains__(self, name: str) -> bool:
        return name in self._classes
