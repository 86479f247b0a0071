"""Positional-encoding zoo. Every variant is imported here explicitly so the registry is greppable."""

from posbench.pe import (  # noqa: F401  (imported for their @register side effect)
    alibi,
    digits,
    fire,
    hybrid,
    kerple,
    learned,
    none,
    randomized,
    relative_learned,
    rope,
    sinusoidal,
    t5,
    xpos,
)
from posbench.pe.base import PEConfig, PEContext, PositionalEncoding, PositionRangeError
from posbench.pe.registry import build_pe, get_pe_class, pe_classes, pe_names, register, validate_pe

__all__ = ["PEConfig", "PEContext", "PositionalEncoding", "PositionRangeError", "build_pe",
           "get_pe_class", "pe_classes", "pe_names", "register", "validate_pe"]
