"""Learned absolute position embeddings (GPT-2 style), optionally initialised from sinusoids."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from posbench.config_loader import require
from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PEConfig, PositionalEncoding
from posbench.pe.sinusoidal import sinusoidal_table


@dataclass
class LearnedConfig(PEConfig):
    max_positions: int | None = None  # None: the training length (model.seq_len)
    scale: float = 1.0  # multiplies the learned vectors before they are added
    layer_norm: bool = False  # LayerNorm over (token + position), as in the learned-PE notes
    init_std: float = 0.02

    def check(self) -> None:
        if self.max_positions is not None and self.max_positions < 1:
            raise ConfigError(f"pe.max_positions must be >= 1, got {self.max_positions}")
        if not self.scale > 0 or not self.init_std > 0:
            raise ConfigError("pe.scale and pe.init_std must be > 0")


@PES.register("learned")
class LearnedPE(PositionalEncoding):
    kind = "absolute"
    summary = "Learned table of max_positions vectors (optional scale and LayerNorm); no extrapolation"
    Config = LearnedConfig

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.table = nn.Embedding(self.max_positions, ctx.d_model)
        self.norm = nn.LayerNorm(ctx.d_model) if cfg.layer_norm else nn.Identity()
        self.reset_parameters()

    @property
    def max_positions(self):
        return self.cfg.max_positions or self.ctx.seq_len

    def reset_parameters(self) -> None:
        nn.init.normal_(self.table.weight, std=self.cfg.init_std)

    def embed(self, x_BTD, pos_T):
        # positions are float32 integers; the lookup needs int64 (check_positions ran already)
        pe_TD = self.table(pos_T.long()) * self.cfg.scale
        return self.norm(x_BTD + pe_TD.to(x_BTD.dtype))


@PES.register("sininit")
class SinInitPE(LearnedPE):
    summary = "Learned table initialised from the sinusoidal table (trainable)"

    @classmethod
    def check_model(cls, cfg, ctx):
        require(ctx.d_model % 2 == 0, f"`sininit` needs an even model.d_model, got {ctx.d_model}")

    def reset_parameters(self) -> None:
        with torch.no_grad():
            pos = torch.arange(self.max_positions, dtype=torch.float32)
            self.table.weight.copy_(sinusoidal_table(pos, self.ctx.d_model))
