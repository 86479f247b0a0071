"""Shared machinery of PEs that add a fixed (non-learned) table to the token embeddings."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posbench.errors import ConfigError
from posbench.pe.encoding import PEConfig, PositionalEncoding


@dataclass
class TableConfig(PEConfig):
    # multiplies the table before it is added; None: the variant's default (see default_scale)
    scale: float | None = None

    def check(self) -> None:
        if self.scale is not None and not self.scale > 0:
            raise ConfigError(f"pe.scale must be > 0, got {self.scale}")


class FixedTablePE(PositionalEncoding):
    """Adds `scale * table(pos)` to the embeddings; subclasses define `table` in float32."""

    kind = "absolute"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.scale = cfg.scale if cfg.scale is not None else self.default_scale()

    def default_scale(self) -> float:
        """Raw tables by default: digit and integer codes are studied as they are."""
        return 1.0

    def table(self, pos_T: torch.Tensor) -> torch.Tensor:  # (T, D) float32
        raise NotImplementedError

    def embed(self, x_BTD, pos_T):
        pe_TD = self.table(pos_T.float()) * self.scale
        return x_BTD + pe_TD.to(x_BTD.dtype)
