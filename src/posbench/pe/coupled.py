"""Position coupling (Cho et al. 2024, "Position Coupling: Improving Length Generalization of Arithmetic
Transformers Using Task Structure", arXiv 2405.20671): tokens of equal significance (the operands' and the
result's digits of one place) share a position id, and those ids, taken from the data (a task's per-token ids,
`data_positions`), are the positions of an inner PE (RoPE by default, or a learned table). In training the ids of
a row are shifted by one random start s in [0, max_offset) (the paper's random starting position), so a learned
inner table is trained past the training lengths. Rows without data ids use the inner PE's own positions."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PEContext
from posbench.pe.wrapper import WrapperConfig, WrapperPE


@PES.register("coupled")
class CoupledPositions(WrapperPE):
    summary = "Position coupling (Cho et al. 2024): the data's shared ids per digit place as an inner PE's positions"

    @dataclass
    class Config(WrapperConfig):
        max_positions: int | None = None  # ids defined at evaluation; None: model.seq_len
        max_offset: int = 0  # training shifts a row's ids by s ~ U[0, max_offset); 0: no shift

        def check(self) -> None:
            if self.inner.name in ("coupled", "randomized", "abacus"):
                raise ConfigError(f"pe.inner cannot be `{self.inner.name}`: the coupled ids are the inner PE's "
                                  "positions; use rope, learned, sinusoidal, ...")
            if self.max_positions is not None and self.max_positions < 1:
                raise ConfigError(f"pe.max_positions must be >= 1, got {self.max_positions}")
            if self.max_offset < 0:
                raise ConfigError(f"pe.max_offset must be >= 0, got {self.max_offset}")

    @staticmethod
    def inner_context(cfg, ctx: PEContext) -> PEContext:
        # a learned inner table needs a row for every shifted id
        return dataclasses.replace(ctx, seq_len=(cfg.max_positions or ctx.seq_len) + max(cfg.max_offset - 1, 0))

    @property
    def max_positions(self):
        return self.cfg.max_positions or self.ctx.seq_len

    def positions(self, T, device, offset=0):
        self.check_positions(offset + T)
        return self.inner.positions(T, device, offset)

    def data_positions(self, data_BT, default):  # the ids replace the default positions
        data_BT = data_BT.float()
        if data_BT.numel():
            self.check_positions(int(data_BT.max().item()) + 1)
        if self.training and self.cfg.max_offset > 1:
            data_BT = data_BT + torch.randint(0, self.cfg.max_offset, (data_BT.shape[0], 1), device=data_BT.device)
        return data_BT
