"""RNoPE-SWA (Yang et al. 2025, "Rope to Nope and Back Again: A New Hybrid Attention Strategy", Cohere,
arXiv 2501.18795): interleave sliding-window layers with RoPE and full-attention layers without any PE (NoPE).
The windowed RoPE layers carry local order (recency); the full NoPE layers retrieve across the whole context,
which is why the model extrapolates. Defaults as the paper's model: three SWA layers per full layer, window
4096 (docs/pe_defaults.md); OLMo-core's `no_global_rope` option is the same split.

A per-layer hybrid whose members are RoPE (windowed) and NoPE (full); the windows reach the attention kernels
through the `layer_window` hook (model/transformer.py merges them with model.attention_window)."""

from __future__ import annotations

from dataclasses import dataclass, field

from posbench.config_loader import require
from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PEConfig
from posbench.pe.hybrid import HybridPerLayer
from posbench.pe.none import NoPE
from posbench.pe.rope import RoPE, RopeConfig
from posbench.pe.window import check_window


@PES.register("rnope_swa")
class RNoPESWA(HybridPerLayer):
    summary = ("RNoPE-SWA (Cohere 2025): RoPE in sliding-window layers, NoPE in full-attention layers "
               "(default 3:1, window 4096)")

    @dataclass
    class Config(PEConfig):
        window: int | None = 4096  # keys a windowed layer sees (its own included); None: full (degenerate)
        swa_layers: int = 3  # windowed RoPE layers before each full NoPE layer
        rope: RopeConfig = field(default_factory=RoPE.Config)  # the windowed layers' RoPE (theta, scaling)

        def check(self) -> None:
            check_window(self.window, "pe.window")  # 1 .. 2**24 keys, or null
            if self.swa_layers < 0:
                raise ConfigError(f"pe.swa_layers must be >= 0, got {self.swa_layers}")
            if self.rope.name != "rope":
                raise ConfigError(f"pe.rope must be a `rope` config, got `{self.rope.name}`")

        @property
        def pattern(self) -> list[PEConfig]:
            """The cycle HybridPerLayer builds: `swa_layers` RoPE layers, then one NoPE layer."""
            return [self.rope] * self.swa_layers + [NoPE.Config()]

    @classmethod
    def check_model(cls, cfg, ctx):
        require(cfg.swa_layers + 1 <= ctx.n_layers,
                f"pe.swa_layers={cfg.swa_layers} windowed layers and one full layer need at least "
                f"{cfg.swa_layers + 1} layers, but the model has {ctx.n_layers} (model.n_layers); lower pe.swa_layers")
        super().check_model(cfg, ctx)

    def layer_window(self, layer):
        return self.cfg.window if layer % (self.cfg.swa_layers + 1) < self.cfg.swa_layers else None
