"""A PE around an inner PE (randomized positions, position coupling): the base relays to the inner PE every hook
the model calls on the model's PE, generated from the contract's list (`HOOKS`, pe/encoding.py), so a hook added
to the contract is relayed without anyone writing it; a wrapper overrides only the hooks it changes. The other
hooks need no relay: "layer" hooks are called on `layer_pe(layer)`, which is relayed (the inner PE's layers),
"module" hooks on every PE module, the inner PE among them, and `check_model` below validates the inner config.

Not relayed (`NOT_RELAYED`), because each decides a derived property of the class (pe/encoding.py `DERIVED`), which
a relay would claim for every wrapper whatever its inner PE:
  drop            returns the config that rebuilds the PE, and a wrapper's config is not its inner's: a wrapper
                  cannot switch its PE (`can_drop` False), and an inner PE that would is refused at load
                  (`check_member_switch`).
  data_positions  `reads_data_positions` (the HF export refuses such PEs): a wrapper reads the data's ids only
                  where it says so itself (coupled); the others ignore them (randomized: its draws are the
                  positions).

A wrapper that overrides a position hook (`POSITION_HOOKS`: randomized, coupled) sets the inner PE's positions, so a
difference of them is no longer a distance in tokens: the inner PE is built with `PEContext.token_distances` False
(`sets_positions`, derived, never declared), and no kernel that reads token distances instead of positions runs it
(flash_alibi refuses it at construction, model/kernels.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from posbench.pe.encoding import HOOKS, PES, PEConfig, PEContext, PositionalEncoding, check_member_switch
from posbench.pe.rope import RoPE

NOT_RELAYED = ("drop", "data_positions")
# the hooks that decide a PE's positions: a wrapper overriding one gives the inner PE positions of its own
POSITION_HOOKS = ("positions", "document_positions", "data_positions")


@dataclass
class WrapperConfig(PEConfig):
    inner: PEConfig = field(default_factory=RoPE.Config)


class WrapperPE(PositionalEncoding):
    kind = "wrapper"  # the instance takes the inner PE's kind
    Config = WrapperConfig

    @staticmethod
    def inner_context(cfg, ctx: PEContext) -> PEContext:
        """The dimensions the inner PE is built for (a wrapper that widens the positions widens its seq_len)."""
        return ctx

    @classmethod
    def check_model(cls, cfg, ctx):
        check_member_switch(cfg.inner, "pe.inner")
        PES.get(cfg.inner.name).check_model(cfg.inner, cls.inner_context(cfg, ctx))

    @classmethod
    def sets_positions(cls) -> bool:
        """Whether this wrapper gives the inner PE positions of its own: derived from the class overriding a hook of
        `POSITION_HOOKS` (module doc)."""
        return any(getattr(cls, hook) is not getattr(WrapperPE, hook) for hook in POSITION_HOOKS)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        inner_ctx = self.inner_context(cfg, ctx)
        if self.sets_positions():
            inner_ctx = dataclasses.replace(inner_ctx, token_distances=False)
        self.inner = PES.build(cfg.inner, inner_ctx)
        self.kind = self.inner.kind


def _relay(name: str):
    if isinstance(getattr(PositionalEncoding, name), property):
        return property(lambda self: getattr(self.inner, name), doc=f"The inner PE's `{name}`.")

    def relay(self, *args, **kwargs):
        return getattr(self.inner, name)(*args, **kwargs)

    relay.__name__ = relay.__qualname__ = name
    relay.__doc__ = f"The inner PE's `{name}`."
    return relay


for _hook in HOOKS:
    if _hook.called_on == "model" and _hook.name not in NOT_RELAYED:
        setattr(WrapperPE, _hook.name, _relay(_hook.name))
