"""Positional-encoding zoo: one module per variant family, each registering its classes with `@PES.register`.
Importing this package imports every module in it (posbench.registry.import_members), so a new PE file is
registered with no list to edit."""

from posbench.pe.encoding import PES, PEConfig, PEContext, PositionalEncoding, PositionRangeError
from posbench.registry import import_members, load_plugins

import_members(__name__, __path__)
load_plugins("posbench_pes")  # variants from installed plug-in packages and --plugin (posbench/registry.py)

__all__ = ["PES", "PEConfig", "PEContext", "PositionalEncoding", "PositionRangeError"]
