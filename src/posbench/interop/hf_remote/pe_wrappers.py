"""The PEs of posbench's remote code that wrap others (torch only): per-layer hybrids, RNoPE-SWA (windowed RoPE
layers and full NoPE layers) and randomized positions (Ruoss et al. 2023) over an inner PE.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from .pe_contract import PositionalEncoding, build_pe, check_pe_config, register


@register("hybrid")
class Hybrid(PositionalEncoding):
    """Layer i uses pattern[i % len(pattern)] (members act inside attention only)."""

    options = frozenset(("pattern",))

    @classmethod
    def check_config(cls, cfg, where):
        super().check_config(cfg, where)
        for i, member in enumerate(cfg.get("pattern") or []):
            check_pe_config(member, f"{where}.pattern[{i}]")

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.members = nn.ModuleList(build_pe(m, ctx) for m in cfg["pattern"])

    @property
    def max_positions(self):
        limits = [m.max_positions for m in self.members if m.max_positions is not None]
        return min(limits) if limits else None

    @property
    def pads_ok(self):
        return all(m.pads_ok for m in self.members)

    def layer_pe(self, layer):
        return self.members[layer % len(self.members)]


@register("rnope_swa")
class RNoPESWA(Hybrid):
    """RNoPE-SWA: `swa_layers` RoPE layers with a sliding window of `window` keys, then one NoPE layer, cycling."""

    options = frozenset(("window", "swa_layers", "rope"))
    nested = {"rope": check_pe_config}

    def __init__(self, cfg, ctx):
        pattern = [cfg["rope"]] * cfg["swa_layers"] + [{"name": "none"}]
        super().__init__({**cfg, "pattern": pattern}, ctx)
        self.cfg = cfg

    def layer_window(self, layer):
        return self.cfg["window"] if layer % (self.cfg["swa_layers"] + 1) < self.cfg["swa_layers"] else None


@register("randomized")
class Randomized(PositionalEncoding):
    """Ruoss et al. 2023: T sorted positions drawn from [0, range) for a sequence of T tokens; at evaluation
    from a generator seeded by (eval_seed, T), so a sequence's positions depend on its length: no KV cache."""

    options = frozenset(("inner", "max_positions", "sample_at_eval", "eval_seed", "positions"))
    nested = {"inner": check_pe_config}
    # positions=integer: distinct integers of [0, range); float: random float sampling (Shimizu et al. 2026),
    # uniform reals on [0, range); both sorted, drawn with the generator's calls posbench makes
    draws = {
        "integer": lambda S, n, gen: torch.randperm(n, generator=gen)[:S].sort().values.to(torch.float32),
        "float": lambda S, n, gen: (torch.rand(S, generator=gen, dtype=torch.float64) * n).sort().values.to(
            torch.float32),
    }

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.range = cfg.get("max_positions") or 8 * ctx.seq_len
        self.inner = build_pe(cfg["inner"], replace(ctx, seq_len=self.range))
        self.whole_sequence = bool(cfg.get("sample_at_eval", True))

    @property
    def max_positions(self):
        return self.range

    @property
    def pads_ok(self):
        # drawn positions belong to a whole unpadded sequence of T tokens (seeded by T)
        return not self.whole_sequence and self.inner.pads_ok

    def positions(self, index_BS):
        self.check_positions(int(index_BS.max().item()) + 1 if index_BS.numel() else 0)
        if not (self.training or self.whole_sequence):
            return self.inner.positions(index_BS)
        S = index_BS.shape[-1]
        if index_BS.shape[0] != 1 or int(index_BS[0, 0]) != 0:
            raise ValueError("randomized positions are drawn for a whole unpadded sequence; decode without a KV "
                             "cache")
        gen = None if self.training else torch.Generator().manual_seed(self.cfg.get("eval_seed", 0) * 1_000_003 + S)
        drawn_S = self.draws[self.cfg.get("positions", "integer")](S, self.range, gen)
        return drawn_S.to(device=index_BS.device, dtype=torch.float32)[None]

    def embed(self, x_BTD, pos_BT):
        return self.inner.embed(x_BTD, pos_BT)

    def layer_pe(self, layer):
        return self.inner.layer_pe(layer)

    def layer_window(self, layer):
        return self.inner.layer_window(layer)
