"""Positional-encoding zoo. Every variant is imported here explicitly so the registry is greppable."""

from posbench.pe import (  # noqa: F401  (imported for their @PES.register side effect)
    abacus,
    alibi,
    cope,
    coupled,
    digits,
    drope,
    fire,
    fope,
    fox,
    hope,
    hybrid,
    kerple,
    learned,
    modded_rope,
    none,
    pope,
    randomized,
    relative_learned,
    rnope_swa,
    rope,
    sinusoidal,
    t5,
    xpos,
)
from posbench.pe.encoding import PES, PEConfig, PEContext, PositionalEncoding, PositionRangeError

__all__ = ["PES", "PEConfig", "PEContext", "PositionalEncoding", "PositionRangeError"]
