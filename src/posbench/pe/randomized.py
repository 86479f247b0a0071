"""Randomized positions (Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
Generalization of Transformers"): a sequence of length T gets T sorted positions drawn without
replacement from [0, max_positions), so the wrapped PE sees, during training, every position it will
meet on longer test sequences. One draw per forward pass, shared by the batch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from posbench.config_loader import ConfigError
from posbench.pe.encoding import PES, PEConfig, PEContext, PositionalEncoding
from posbench.pe.rope import RoPE


@PES.register("randomized")
class RandomizedPositions(PositionalEncoding):
    kind = "wrapper"  # the instance takes the wrapped PE's kind
    summary = "Wrapper: sorted random positions from a larger range (Ruoss et al. 2023) around any PE"

    @dataclass
    class Config(PEConfig):
        inner: PEConfig = field(default_factory=RoPE.Config)
        max_positions: int | None = None  # None: 8x the training length
        # The paper samples at test time too (dense 0..T-1 positions never occur in training);
        # evaluation draws come from a fixed seed so results are reproducible.
        sample_at_eval: bool = True
        eval_seed: int = 0

        def check(self) -> None:
            if self.inner.name == "randomized":
                raise ConfigError("pe.inner cannot itself be `randomized`")
            if self.max_positions is not None and self.max_positions < 1:
                raise ConfigError(f"pe.max_positions must be >= 1, got {self.max_positions}")

    @staticmethod
    def _inner_ctx(cfg, ctx: PEContext) -> PEContext:
        # the inner PE must cover the whole sampled range (a learned table gets max_positions rows)
        return dataclasses.replace(ctx, seq_len=cfg.max_positions or 8 * ctx.seq_len)

    @classmethod
    def validate(cls, cfg, ctx):
        PES.get(cfg.inner.name).validate(cfg.inner, cls._inner_ctx(cfg, ctx))

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.range = self._inner_ctx(cfg, ctx).seq_len
        self.inner = PES.build(cfg.inner, self._inner_ctx(cfg, ctx))
        self.kind = self.inner.kind

    @property
    def max_positions(self):
        return self.range

    @property
    def is_relative(self):
        return self.inner.is_relative

    def positions(self, T, device, offset=0):
        self.check_positions(offset + T)
        if not (self.training or self.cfg.sample_at_eval):
            return self.inner.positions(T, device, offset)
        if offset:
            raise ValueError("randomized positions are drawn for a whole sequence; incremental decoding "
                             "with an offset needs pe.sample_at_eval=false")
        gen = None
        if not self.training:
            gen = torch.Generator().manual_seed(self.cfg.eval_seed * 1_000_003 + T)
        draw = torch.randperm(self.range, generator=gen)[:T]
        return draw.sort().values.to(device=device, dtype=torch.float32)

    def embed(self, x_BTD, pos_T):
        return self.inner.embed(x_BTD, pos_T)

    def layer_pe(self, layer):
        return self.inner.layer_pe(layer)
