"""Positions written as digits (binary, decimal) or as one normalised number, added to embeddings.

These are the "unconventional" encodings of the exploration this project grew from: they let a
study check *why* an encoding fails (magnitude, lack of smoothness, no relative structure).
- raw digits: channel j holds digit j (least significant first) in {0..base-1}, other channels 0;
- normalised digits: digit mapped to [-1, 1] and the vector divided by sqrt(n_digits), so its norm
  is at most 1 whatever the position;
- integer: every channel holds p / max_positions, in [0, 1).

`pe.layout=reference` computes the reference framework's tables exactly instead: the position written
most significant digit first across *all* d_model channels (position 7 in 8 channels: 0,0,0,0,0,1,1,1;
leading channels hold leading zeros), `_norm` mapping every digit to 2d/(b-1) - 1 (bits to +-1, decimal
digits to (d-4.5)/4.5) with no 1/sqrt(n); n_digits is then unused. Pair it with model.embed_scale=sqrt_d
(configs/pe/reference_*.yaml) to reproduce that framework's models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from posbench.config_loader import require
from posbench.errors import ConfigError
from posbench.pe.absolute import FixedTablePE, TableConfig
from posbench.pe.encoding import PES

# float32 positions are exact integers below 2**24: no position has a nonzero digit beyond these
EXACT_POSITIONS = 2**24


@dataclass
class DigitsConfig(TableConfig):
    n_digits: int = 16
    layout: Literal["ours", "reference"] = "ours"  # see the module docstring

    def check(self) -> None:
        super().check()
        if not 1 <= self.n_digits <= 24:  # positions are float32 integers: exact below 2**24
            raise ConfigError(f"pe.n_digits must be in 1..24, got {self.n_digits}")


class DigitsPE(FixedTablePE):
    Config = DigitsConfig
    digit_base: int = 2
    normalised: bool = False

    @property
    def max_positions(self):
        if self.cfg.layout == "reference":
            return min(self.digit_base ** min(self.ctx.d_model, 32), EXACT_POSITIONS)
        return self.digit_base ** self.cfg.n_digits

    @classmethod
    def check_model(cls, cfg, ctx):
        require(cfg.layout == "reference" or cfg.n_digits <= ctx.d_model,
                f"`{cfg.name}` writes {cfg.n_digits} digits into model.d_model={ctx.d_model} channels; "
                f"lower pe.n_digits")

    def digits(self, pos_T, n: int):
        """(T, n) (or (B, T, n)) digits of each position, least significant first, as float32."""
        p = pos_T.long()
        # exact integer powers made in Python (a constant under torch.compile, where inductor's integer pow
        # of arange came out 0 and divided by zero), capped below int64's range: for base 10 and n >= 19,
        # 10**k would wrap; every position (< 2**24) has digit 0 there, which the cap gives
        powers = torch.tensor([min(self.digit_base ** k, 2 ** 62) for k in range(n)], device=p.device)
        return ((p[..., None] // powers) % self.digit_base).float()

    def to_unit(self, digits):
        return 2 * digits / (self.digit_base - 1) - 1  # bits -> +-1, decimal d -> (d - 4.5) / 4.5

    def table(self, pos_T):
        if self.cfg.layout == "reference":
            return self.reference_table(pos_T)
        digits_TN = self.digits(pos_T, self.cfg.n_digits)
        if self.normalised:
            digits_TN = self.to_unit(digits_TN) / self.cfg.n_digits ** 0.5
        out = torch.zeros(*pos_T.shape, self.ctx.d_model, device=pos_T.device, dtype=torch.float32)
        out[..., : self.cfg.n_digits] = digits_TN
        return out

    def reference_table(self, pos_T):
        d = self.ctx.d_model
        # digits beyond those any exact position needs are zeros; computing only these keeps the powers
        # inside int64 at any d_model
        n = min(d, math.ceil(math.log(EXACT_POSITIONS, self.digit_base)))
        out = torch.zeros(*pos_T.shape, d, device=pos_T.device, dtype=torch.float32)
        out[..., d - n:] = self.digits(pos_T, n).flip(-1)  # most significant first, ending in the last channel
        return self.to_unit(out) if self.normalised else out


@PES.register("binary")
class BinaryPE(DigitsPE):
    summary = "Position's bits in {0,1} written into the first n_digits channels"
    digit_base = 2


@PES.register("binary_norm")
class BinaryNormPE(BinaryPE):
    summary = "Position's bits mapped to +-1/sqrt(n_digits) (unit-norm binary code)"
    normalised = True


@PES.register("decimal")
class DecimalPE(DigitsPE):
    summary = "Position's decimal digits 0..9 written into the first n_digits channels"
    digit_base = 10

    @dataclass
    class Config(DigitsConfig):
        n_digits: int = 6


@PES.register("decimal_norm")
class DecimalNormPE(DecimalPE):
    summary = "Position's decimal digits mapped to [-1,1]/sqrt(n_digits)"
    normalised = True


@PES.register("integer")
class IntegerPE(FixedTablePE):
    summary = "Normalised position p / max_positions added to every channel"

    @dataclass
    class Config(TableConfig):
        max_positions: int | None = None  # None: the training length (model.seq_len)

    @property
    def max_positions(self):
        return self.cfg.max_positions or self.ctx.seq_len

    def table(self, pos_T):
        value_T = pos_T.float() / self.max_positions
        return value_T[..., None].expand(*value_T.shape, self.ctx.d_model).contiguous()
