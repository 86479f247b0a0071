"""Randomized positions (Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
Generalization of Transformers"): a sequence of length T gets T sorted positions drawn without
replacement from [0, max_positions), so the wrapped PE sees, during training, every position it will
meet on longer test sequences. One draw per forward pass, shared by the batch; with positions that restart at
every document (model.packing.positions=document) one draw per document instead, the draw a document of that
length gets alone (so a packed window computes what its documents do alone, at evaluation's fixed seed too).

`pe.positions=float` is random float sampling (RFS, Shimizu et al. 2026, "Position Encoding with Random Float
Sampling Enhances Length Generalization of Transformers"): T sorted values drawn uniformly from the continuous
range [0, max_positions), at training and, as the paper does, at inference. Only PEs that are functions of a real
position take them (the paper's sinusoidal, RoPE and ALiBi); a table lookup or a bucketed distance would floor
them, so every other inner PE is refused."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PEContext
from posbench.pe.wrapper import WrapperConfig, WrapperPE


def integer_draw(T: int, n: int, gen) -> torch.Tensor:
    """Ruoss et al.: T distinct integers of [0, n), sorted."""
    return torch.randperm(n, generator=gen)[:T].sort().values.to(torch.float32)


def float_draw(T: int, n: int, gen) -> torch.Tensor:
    """RFS: T values uniform on [0, n), sorted (float32, the positions' dtype)."""
    return (torch.rand(T, generator=gen, dtype=torch.float64) * n).sort().values.to(torch.float32)


DRAWS = {"integer": integer_draw, "float": float_draw}
# inner PEs that are functions of a real-valued position: RFS's three (its paper, section 3)
FLOAT_POSITION_PES = ("sinusoidal", "rope", "alibi")


@PES.register("randomized")
class RandomizedPositions(WrapperPE):
    summary = ("Wrapper: sorted random positions from a larger range (Ruoss et al. 2023; pe.positions=float: RFS, "
               "Shimizu et al. 2026) around any PE")

    @dataclass
    class Config(WrapperConfig):
        max_positions: int | None = None  # None: 8x the training length
        # The paper samples at test time too (dense 0..T-1 positions never occur in training);
        # evaluation draws come from a fixed seed so results are reproducible.
        sample_at_eval: bool = True
        eval_seed: int = 0
        positions: str = "integer"  # integer (Ruoss et al.) | float (RFS, Shimizu et al. 2026)

        def check(self) -> None:
            if self.positions not in DRAWS:
                raise ConfigError(f"pe.positions must be one of {sorted(DRAWS)}, got {self.positions!r}")
            if self.positions == "float" and self.inner.name not in FLOAT_POSITION_PES:
                raise ConfigError(
                    f"pe.positions=float (random float sampling) gives real-valued positions, which "
                    f"`{self.inner.name}` would floor (a table or bucket lookup); use pe.inner.name="
                    f"{'|'.join(FLOAT_POSITION_PES)}, or pe.positions=integer")
            if self.inner.name == "randomized":
                raise ConfigError("pe.inner cannot itself be `randomized`")
            if self.max_positions is not None and self.max_positions < 1:
                raise ConfigError(f"pe.max_positions must be >= 1, got {self.max_positions}")

    @staticmethod
    def inner_context(cfg, ctx: PEContext) -> PEContext:
        # the inner PE must cover the whole sampled range (a learned table gets max_positions rows)
        return dataclasses.replace(ctx, seq_len=cfg.max_positions or 8 * ctx.seq_len)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.range = self.inner_context(cfg, ctx).seq_len

    @property
    def max_positions(self):
        return self.range

    def positions(self, T, device, offset=0):
        self.check_positions(offset + T)
        if not (self.training or self.cfg.sample_at_eval):
            return self.inner.positions(T, device, offset)
        if offset:
            raise ValueError("randomized positions are drawn for a whole sequence; incremental decoding "
                             "with an offset needs pe.sample_at_eval=false")
        return self._draw(T, self._generator(T)).to(device=device)

    def _draw(self, T, gen):
        return DRAWS[self.cfg.positions](T, self.range, gen)

    def _generator(self, T):
        return None if self.training else torch.Generator().manual_seed(self.cfg.eval_seed * 1_000_003 + T)

    def document_positions(self, within_BT, doc_BT):
        if not (self.training or self.cfg.sample_at_eval):
            return self.inner.document_positions(within_BT, doc_BT)
        if within_BT.numel():
            self.check_positions(int(within_BT.max().item()) + 1)
            if (within_BT[:, 0] > 0).any():
                raise ValueError("randomized positions are drawn for a whole document; incremental decoding "
                                 "inside one needs pe.sample_at_eval=false")
        out_BT = torch.empty(within_BT.shape, dtype=torch.float32)
        for b, row in enumerate(doc_BT.cpu()):  # one draw per document (a Python loop: few documents per row)
            _, counts = torch.unique_consecutive(row, return_counts=True)
            start = 0
            for n in counts.tolist():
                out_BT[b, start:start + n] = self._draw(n, self._generator(n))
                start += n
        return out_BT.to(within_BT.device)
