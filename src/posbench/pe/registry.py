"""Name -> PositionalEncoding class. Variants register themselves with `@register("name")`;
`pe/__init__.py` imports every variant file explicitly, so `grep register` finds them all."""

from __future__ import annotations

from posbench.pe.base import PEConfig, PEContext, PositionalEncoding
from posbench.registry import Registry


def _check(name: str, cls) -> None:
    if not issubclass(cls.Config, PEConfig):
        raise TypeError(f"{cls.__name__}.Config must subclass PEConfig")
    if not cls.summary:
        raise TypeError(f"{cls.__name__} needs a one-line `summary`")


PES = Registry("positional encoding", _check)
register = PES.register


def get_pe_class(name: str, where: str = "pe.name") -> type[PositionalEncoding]:
    return PES.get(name, where, ". List them with `python train.py --list-pe-types`.")


def pe_names() -> list[str]:
    return PES.names()


def pe_classes() -> dict[str, type[PositionalEncoding]]:
    return PES.classes()


def validate_pe(cfg: PEConfig, ctx: PEContext) -> None:
    get_pe_class(cfg.name).validate(cfg, ctx)


def build_pe(cfg: PEConfig, ctx: PEContext) -> PositionalEncoding:
    return get_pe_class(cfg.name)(cfg, ctx)
