"""Name -> PositionalEncoding class. Variants register themselves with `@register("name")`;
`pe/__init__.py` imports every variant file explicitly, so `grep register` finds them all."""

from __future__ import annotations

from posbench.config_loader import ConfigError, nearest
from posbench.pe.base import PEConfig, PEContext, PositionalEncoding

_REGISTRY: dict[str, type[PositionalEncoding]] = {}


def register(name: str):
    def wrap(cls: type[PositionalEncoding]) -> type[PositionalEncoding]:
        if name in _REGISTRY:
            raise RuntimeError(f"PE `{name}` registered twice ({_REGISTRY[name]} and {cls})")
        if not issubclass(cls.Config, PEConfig):
            raise TypeError(f"{cls.__name__}.Config must subclass PEConfig")
        if not cls.summary:
            raise TypeError(f"{cls.__name__} needs a one-line `summary`")
        if cls.Config().name != name:
            raise TypeError(f"{cls.__name__}.Config must declare `name: str = \"{name}\"`")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return wrap


def get_pe_class(name: str, where: str = "pe.name") -> type[PositionalEncoding]:
    if name not in _REGISTRY:
        raise ConfigError(f"unknown positional encoding `{name}` at {where}" + nearest(name, _REGISTRY)
                          + ". List them with `python train.py --list-pe-types`.")
    return _REGISTRY[name]


def pe_names() -> list[str]:
    return sorted(_REGISTRY)


def pe_classes() -> dict[str, type[PositionalEncoding]]:
    return dict(_REGISTRY)


def validate_pe(cfg: PEConfig, ctx: PEContext) -> None:
    get_pe_class(cfg.name).validate(cfg, ctx)


def build_pe(cfg: PEConfig, ctx: PEContext) -> PositionalEncoding:
    return get_pe_class(cfg.name)(cfg, ctx)
