"""Per-layer hybrids: layer i uses pattern[i % len(pattern)], e.g. [rope, rope, rope, none] for
NoPE every 4th layer (as in several long-context models). Members act inside attention (rotary or
bias); absolute PEs are added once to the embeddings, so they cannot vary by layer."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from posbench.config_loader import require
from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PEConfig, PositionalEncoding, check_member_switch, decoder_only
from posbench.pe.none import NoPE
from posbench.pe.rope import RoPE


def _default_pattern():
    return [RoPE.Config(), RoPE.Config(), RoPE.Config(), NoPE.Config()]


@PES.register("hybrid")
class HybridPerLayer(PositionalEncoding):
    kind = "hybrid"
    summary = "Wrapper: a different PE per layer, cycling pe.pattern (default: NoPE every 4th layer)"

    @dataclass
    class Config(PEConfig):
        pattern: list[PEConfig] = field(default_factory=_default_pattern)

        def check(self) -> None:
            if not self.pattern:
                raise ConfigError("pe.pattern must list at least one PE")
            for i, member in enumerate(self.pattern):
                kind = PES.get(member.name).kind
                if kind in ("absolute", "hybrid") or member.name == "randomized":
                    raise ConfigError(f"pe.pattern[{i}] = `{member.name}` is {kind}; a per-layer hybrid "
                                      "takes PEs that act inside attention (rotary, bias or none)")

    @classmethod
    def check_model(cls, cfg, ctx):
        require(len(cfg.pattern) <= ctx.n_layers,
                f"pe.pattern has {len(cfg.pattern)} entries but the model has {ctx.n_layers} layers")
        for i, member in enumerate(cfg.pattern):
            check_member_switch(member, f"pe.pattern[{i}]")
            # a member's state or objective (TAPE's, SeqPE's) is made by the model's PE, which a hybrid is not
            require(not decoder_only(PES.get(member.name)),
                    f"pe `{member.name}` carries a state through the layers or adds its own objective: it must be "
                    "the model's PE (pe.name), not a member of pe.pattern")
            PES.get(member.name).check_model(member, ctx)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.members = nn.ModuleList(PES.build(m, ctx) for m in cfg.pattern)

    @property
    def max_positions(self):
        limits = [m.max_positions for m in self.members if m.max_positions is not None]
        return min(limits) if limits else None

    @property
    def is_relative(self):
        return all(m.is_relative for m in self.members)

    def layer_pe(self, layer):
        return self.members[layer % len(self.members)]
