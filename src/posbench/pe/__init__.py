"""Positional-encoding zoo. Every variant is imported here explicitly so the registry is greppable."""

from posbench.pe import (  # noqa: F401  (imported for their @PES.register side effect)
    abacus,
    alibi,
    coupled,
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
from posbench.pe.encoding import PES, PEConfig, PEContext, PositionalEncoding, PositionRangeError

__all__ = ["PES", "PEConfig", "PEContext", "PositionalEncoding", "PositionRangeError"]
