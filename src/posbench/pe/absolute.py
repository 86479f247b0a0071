"""Shared machinery of PEs that add a fixed (non-learned) table to the token embeddings."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posbench.config_loader import ConfigError
from posbench.pe.base import PEConfig, PositionalEncoding


@dataclass
class TableConfig(PEConfig):
    scale: float = 1.0  # multiplies the table before it is added (token embeddings start at std 0.02)

    def check(self) -> None:
        if not self.scale > 0:
            raise ConfigError(f"pe.scale must be > 0, got {self.scale}")


class FixedTablePE(PositionalEncoding):
    """Adds `scale * table(pos)` to the embeddings; subclasses define `table` in float32."""

    kind = "absolute"

    def table(self, pos_T: torch.Tensor) -> torch.Tensor:  # (T, D) float32
        raise NotImplementedError

    def embed(self, x_BTD, pos_T):
        pe_TD = self.table(pos_T.float()) * self.cfg.scale
        return x_BTD + pe_TD.to(x_BTD.dtype)
