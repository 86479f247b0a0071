"""Position coupling (Cho et al. 2024, "Position Coupling: Improving Length Generalization of Arithmetic
Transformers Using Task Structure", arXiv 2405.20671): tokens of equal significance (the operands' and the
result's digits of one place) share a position id, and those ids, taken from the data (a task's per-token ids,
`data_positions`), are the positions of an inner PE (RoPE by default, or a learned table). In training the ids of
a row are shifted by one random start (the paper's random starting position), so a learned inner table is trained
past the training lengths: `offset=fixed` draws s in [0, max_offset) for every row; `offset=fit` draws it as the
authors do (HanseulJo/position-coupling, src/data/addition.py, AdditionDatasetWithCoupledPositions.__getitem__:
start ~ U[1, max_position - len(labels)], the result's padded length), from every start that keeps the row's
largest id inside the table, so a short row can land anywhere and every id below max_positions is trained. Rows
without data ids use the inner PE's own positions."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

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
        max_offset: int = 0  # offset=fixed: training shifts a row's ids by s ~ U[0, max_offset); 0: no shift
        offset: Literal["fixed", "fit"] = "fixed"  # fit: s ~ U[0, max_positions - the row's largest id)

        def check(self) -> None:
            super().check()
            if self.inner.name in ("coupled", "randomized", "abacus"):
                raise ConfigError(f"pe.inner cannot be `{self.inner.name}`: the coupled ids are the inner PE's "
                                  "positions; use rope, learned, sinusoidal, ...")
            if self.max_positions is not None and self.max_positions < 1:
                raise ConfigError(f"pe.max_positions must be >= 1, got {self.max_positions}")
            if self.max_offset < 0:
                raise ConfigError(f"pe.max_offset must be >= 0, got {self.max_offset}")
            if self.offset == "fit" and self.max_offset:
                raise ConfigError(f"pe.offset=fit draws each row's shift from pe.max_positions; pe.max_offset="
                                  f"{self.max_offset} belongs to pe.offset=fixed: give one of the two")

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
        if self.training and self.cfg.offset == "fit" and data_BT.numel():
            room_B1 = self.max_positions - data_BT.amax(dim=1, keepdim=True)  # starts that keep the row inside
            data_BT = data_BT + (torch.rand(room_B1.shape, device=data_BT.device) * room_B1).floor()
        elif self.training and self.cfg.max_offset > 1:
            data_BT = data_BT + torch.randint(0, self.cfg.max_offset, (data_BT.shape[0], 1), device=data_BT.device)
        return data_BT
