"""One explicit, greppable registry type for every family of small classes (PEs, RoPE scalings, attention
kernels, tasks, data sources, tokenizers, evaluation suites, ...): `@REGISTRY.register("name")` in the
class's own file, lookups that fail with the nearest valid name.

The registered name is written once, in the decorator. `register` gives it to the class (`cls.name`, or
the attribute the registry names) and to the class's config: a nested `Config` dataclass must not declare
`name` itself; the registry derives `Config` with `name` defaulting to the registered name (so a variant
with no options of its own needs no nested Config at all). A registry whose classes *are* their configs
(`configs=True`, e.g. model architectures) derives the class itself the same way. The derived class takes
the place and `__qualname__` of the one it derives from, so configs stay picklable for spawned workers.

Discovery, one way for every registry: a registry whose variants live in files of their own (PEs in posbench.pe,
tasks in posbench.data.tasks, evaluation suites in posbench.evaluation.suites) has its package's `__init__.py`
call `import_members(__name__, __path__)`, which imports every module of the package in name order, so a new
variant file is found with no list to edit (`grep -rn "import_members(" src` lists those packages, `grep -rn
"register(" src` every registered name). The other registries keep their few variants beside the registry, in
its own file. Variants from outside the package (plug-ins) come the same way: `load_plugins(group)` after
`import_members` imports the modules of every installed distribution's Python entry points in `group`
(`posbench_pes`, `posbench_tasks`, `posbench_suites`) and those named by `--plugin MODULE` on a command (kept in
the POSBENCH_PLUGINS environment variable, so worker processes import them too).
Registration follows the modules' name order (`names()` is sorted; iterating a registry gives
the registration order, which CLI listings and tests read).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Iterator

from posbench.config_loader import nearest
from posbench.errors import ConfigError, clip


def _declares_name(config_cls) -> bool:
    return "name" in inspect.get_annotations(config_cls)


def import_members(package: str, path: Iterable[str]) -> None:
    """Import every module of the package `package` (its `__path__`), in name order: their `@X.register`
    decorators run, so the registry holds every variant file the package has (the module docstring)."""
    for module in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        importlib.import_module(f"{package}.{module.name}")


PLUGIN_ENV = "POSBENCH_PLUGINS"  # modules named by --plugin, os.pathsep-separated: set for child processes too


def load_plugins(group: str) -> None:
    """Import every module of the entry points in `group` and every POSBENCH_PLUGINS module: their
    `@X.register` decorators run as a module of the package's would. An entry point's value is its module
    (`my_pe_package.learned_alibi`); a module that fails to import names itself and the entry point."""
    import os
    from importlib import metadata

    for ep in sorted(metadata.entry_points(group=group), key=lambda e: e.name):
        _import_plugin(ep.module, f"entry point `{ep.name}` of group `{group}`")
    for name in filter(None, os.environ.get(PLUGIN_ENV, "").split(os.pathsep)):
        _import_plugin(name, "--plugin")


def add_plugins(modules: list[str]) -> None:
    """`--plugin MODULE` of a command: import each now (their PEs, tasks register) and keep them in
    POSBENCH_PLUGINS so the processes the command starts import them as well."""
    import os

    for name in modules:
        _import_plugin(name, "--plugin")
    known = [m for m in os.environ.get(PLUGIN_ENV, "").split(os.pathsep) if m]
    os.environ[PLUGIN_ENV] = os.pathsep.join(dict.fromkeys(known + list(modules)))


def _import_plugin(module: str, where: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(f"plug-in module `{clip(module, 80)}` ({where}) cannot be imported: {clip(str(e), 160)} "
                          "(is its package installed in this environment?)") from None


def named_dataclass(base: type, name: str, qualname: str, module: str) -> type:
    """A dataclass subclass of `base` whose `name` field defaults to `name`, reachable as module.qualname."""
    namespace = {"__annotations__": {"name": str}, "name": name, "__module__": module, "__qualname__": qualname,
                 "__doc__": base.__doc__}
    derived = type(base.__name__, (base,), namespace)
    params = base.__dataclass_params__
    return dataclasses.dataclass(derived, init=params.init, repr=params.repr, eq=params.eq, order=params.order,
                                 unsafe_hash=params.unsafe_hash, frozen=params.frozen)


class Registry:
    def __init__(self, kind: str, check: Callable[[str, type], None] | None = None, *, where: str | None = None,
                 hint: str = "", attr: str = "name", configs: bool = False):
        self.kind = kind  # "positional encoding", "task", ... for messages
        self._classes: dict[str, type] = {}
        self._check = check
        self.where, self.hint = where, hint  # the config key a name comes from; advice after "did you mean"
        self._attr = attr  # the class attribute that receives the registered name
        self._configs = configs  # the registered classes are config dataclasses themselves

    def register(self, name: str):
        def wrap(cls):
            if name in self._classes:
                raise RuntimeError(f"{self.kind} `{name}` registered twice ({self._classes[name]} and {cls})")
            if self._configs:
                cls = self._named(cls, cls, name, cls.__qualname__)
            elif dataclasses.is_dataclass(getattr(cls, "Config", None)):
                cls.Config = self._named(cls, cls.Config, name, f"{cls.__qualname__}.Config")
            if self._check:
                self._check(name, cls)
            setattr(cls, self._attr, name)
            self._classes[name] = cls
            return cls

        return wrap

    def unregister(self, name: str) -> None:
        """Remove `name` (a variant registered for a while: a test's toy PE, a notebook's experiment)."""
        del self._classes[name]

    @staticmethod
    def _named(cls, config, name: str, qualname: str):
        own = config is cls or cls.__dict__.get("Config") is config
        if own and _declares_name(config):
            raise TypeError(f"{qualname} declares `name`; the registered name (`{name}`) is given by register()")
        return named_dataclass(config, name, qualname, cls.__module__)

    def get(self, name: str, where: str | None = None) -> type:
        if name not in self._classes:
            where = where or self.where
            at = f" at {where}" if where else ""
            raise ConfigError(f"unknown {self.kind} `{clip(name, 60)}`{at}" + nearest(clip(name, 60), self._classes)
                              + self.hint)
        return self._classes[name]

    def config(self, name: str, where: str | None = None) -> type:
        """The Config dataclass of `name`: what a polymorphic config base's `registry_lookup` returns."""
        return self.get(name, where).Config

    def build(self, cfg, *args):
        """An instance of the class `cfg.name` names, built from cfg (and the class's other arguments)."""
        return self.get(cfg.name)(cfg, *args)

    def names(self) -> list[str]:
        return sorted(self._classes)

    def classes(self) -> dict[str, type]:
        return dict(self._classes)

    def __getitem__(self, name: str) -> type:
        return self._classes[name]

    def __iter__(self) -> Iterator[str]:  # registration order
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)

    def __contains__(self, name: str) -> bool:
        return name in self._classes
