"""Abacus embeddings (McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right Embeddings",
arXiv 2405.17399, section 3): a learned embedding indexed by each digit's place within its number (1 for the
least significant digit, in the reversed format), added to the token embeddings. The places come from the data
(a task's per-token ids, `data_positions`); non-digit tokens carry id 0 and get row 0. In training every digit
place of a row is shifted by one random offset k in [0, max_offset) (the paper's k ~ U[0, 100)), so rows past
the trained places are trained too and longer numbers at test time find trained rows.

`shift=batch` draws one k for the whole batch, as the authors' code does (mcleish7/arithmetic at 86022a5,
cramming/architectures/embeddings.py:529-533: `k = random.randint(0, self.max_k)` once per forward, with max_k =
`max_abacus_len` = 100 from cramming/config/arch/crammed-depthrecurrent.yaml, both ends included: their setting is
max_offset=101 here); `shift=row` (the default) draws one k per row, so one batch trains many places at once.
Attention itself gets no positional signal here (the paper's NoPE base); rows without data ids use their token
indices as places."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PEConfig, PositionalEncoding


@PES.register("abacus")
class Abacus(PositionalEncoding):
    kind = "absolute"
    summary = "Abacus (McLeish et al. 2024): learned embedding of each digit's place, from the data's ids"

    @dataclass
    class Config(PEConfig):
        max_positions: int | None = None  # places (ids) defined at evaluation; None: model.seq_len
        max_offset: int = 100  # training shifts a row's digit places by k ~ U[0, max_offset); 0: no shift
        shift: Literal["row", "batch"] = "row"  # one k per row, or one per batch (the authors' code)
        init_std: float = 0.02

        def check(self) -> None:
            if self.max_positions is not None and self.max_positions < 1:
                raise ConfigError(f"pe.max_positions must be >= 1, got {self.max_positions}")
            if self.max_offset < 0 or not self.init_std > 0:
                raise ConfigError(f"pe.max_offset must be >= 0 (got {self.max_offset}) and pe.init_std > 0")

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        # rows for every place a shifted training row can reach: max_positions - 1 + max_offset - 1
        self.table = nn.Embedding(self.max_positions + max(cfg.max_offset - 1, 0), ctx.d_model)
        nn.init.normal_(self.table.weight, std=cfg.init_std)

    @property
    def max_positions(self):
        return self.cfg.max_positions or self.ctx.seq_len

    def data_positions(self, data_BT, default):  # the ids replace the default positions
        data_BT = data_BT.float()
        if data_BT.numel():
            self.check_positions(int(data_BT.max().item()) + 1)
        if self.training and self.cfg.max_offset > 1:
            rows = data_BT.shape[0] if self.cfg.shift == "row" else 1
            k_B1 = torch.randint(0, self.cfg.max_offset, (rows, 1), device=data_BT.device)
            data_BT = torch.where(data_BT > 0, data_BT + k_B1, data_BT)  # id 0 (not a digit) stays 0
        return data_BT

    def embed(self, x_BTD, pos_T):
        # places are float32 integers; the lookup needs int64 (positions / data_positions checked them)
        return x_BTD + self.table(pos_T.long()).to(x_BTD.dtype)
