"""RePo, context re-positioning (Li et al., Sakana AI 2025, "RePo: Language Models with Context Re-Positioning",
arXiv 2512.14391): from a chosen layer on, every token's position is not its index but a number per head that a
small SwiGLU-like network reads from the layer's input,

    z_i = W_z (silu(W_g h_i) * (W_c h_i))          h_i the layer's attention input, W_g, W_c: D -> D/8, W_z: D/8 -> H

and RoPE rotates q_i and k_i of head h by the angles z_i[h] * theta^(-2j/K). The layers below keep RoPE at token
indices. Defaults as the authors' code (SakanaAI/repo, OLMo/olmo/model.py
dynamic_position_encoding_swigluex_multihead, mode `swigluex_multihead`; docs/pe_defaults.md): the hidden width
D // 8, no biases, weights ~ N(0, init_std) truncated at 3 std (init_normal with init_cutoff_factor 3),
re-positioning from layer 5 of their 16 (`dynamic_pe_start_layer: 5`; here the same share of the model's layers,
rounded), the network's weights decayed as every Linear weight of their AdamW (weight_decay 0.1). Trained with the
language-model loss alone, as theirs. Theirs is a second stage, continual pretraining from a RoPE checkpoint: with
`pe.rope_until` (a share of the budget) the run is plain RoPE at token indices on every layer until that point, and
then the position networks take over, as DroPE's drop point switches its PE (`drop()`, training/end_of_step.py).
Before the switch the networks are not in the forward, so they get no gradient and AdamW (which skips a parameter
whose grad is None) neither moves nor decays them: the switch puts fresh networks on a RoPE-trained model, as theirs.
Without it (the default) RePo trains from the first step.

The positions reach attention through the `token_positions` hook: a token's position reads only its own input, so
the keys rotated once and kept in the KV cache are exactly those a full forward computes.

Shape legend: B batch, T tokens, D model dim, M the network's hidden width (D // 8), H heads, R re-positioning layers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from posbench.config_loader import require
from posbench.errors import ConfigError
from posbench.identity_fields import left_out, own_entry
from posbench.pe.encoding import PES
from posbench.pe.rope import RopeConfig, RotaryBase
from posbench.pe.speed import PESpeed

# their OLMo-2 1B re-positions layers 5..15 of 16 (OLMo/configs/official-0425/OLMo2-1B-stage2-seed42-SEXMH-L5.yaml)
AUTHORS_START_SHARE = 5 / 16


@PES.register("repo")
class RePo(RotaryBase):
    summary = ("RePo (Sakana 2025): from pe.start_share of the layers on, RoPE at positions a per-layer SwiGLU "
               "network reads from each token, one per head")

    @dataclass
    class Config(RopeConfig):
        switch_setting: ClassVar[str] = "pe.rope_until"
        switch_after: ClassVar[str] = "with RePo's position networks"
        # share of the layers, from the first, that keep RoPE at token indices; layer round(share * n_layers) and
        # the ones above it re-position (the authors' 5 of 16)
        start_share: float = AUTHORS_START_SHARE
        hidden_divisor: int = 8  # the network's hidden width is d_model // hidden_divisor (their hidden_size // 8)
        # the authors' two stages: the share of the budget trained as plain RoPE before the networks take over
        # (their stage 2 continues a RoPE checkpoint); None: RePo from the first step. Another method than the
        # one-stage run, so part of the identity, and only when set: a run from before the option keeps its own
        rope_until: float | None = field(default=None, metadata=own_entry(lambda v: f"_ropeuntil{v}"))
        # set by training at pe.rope_until (as DroPE's `dropped`): true, the networks re-position. A stage of the run,
        # recorded by meta.json's pe_dropped_at_tokens and checked against it (training/checkpoint_check.py)
        switched: bool = field(default=False, metadata=left_out("a stage of the run, which meta.json records"))

        def check(self) -> None:
            super().check()
            if not 0.0 <= self.start_share < 1.0:
                raise ConfigError(f"pe.start_share is the share of layers kept at token indices, in [0, 1), got "
                                  f"{self.start_share}")
            if self.hidden_divisor < 1:
                raise ConfigError(f"pe.hidden_divisor must be >= 1, got {self.hidden_divisor}")
            if self.rope_until is not None and not 0 < self.rope_until < 1:
                raise ConfigError(f"pe.rope_until is the share of the budget trained as RoPE before RePo's "
                                  f"networks take over, in (0, 1) (or null: RePo from the first step), got "
                                  f"{self.rope_until}")

        def drop_share(self) -> float | None:
            return self.rope_until

        def after_switch(self) -> bool | None:
            return None if self.rope_until is None else self.switched

    @classmethod
    def check_model(cls, cfg, ctx):
        super().check_model(cfg, ctx)
        require(ctx.d_model // cfg.hidden_divisor >= 1,
                f"`repo`'s network is d_model // pe.hidden_divisor = {ctx.d_model} // {cfg.hidden_divisor} wide, "
                "which must be at least 1; lower pe.hidden_divisor")

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.start = round(cfg.start_share * ctx.n_layers)
        R, M, D, H = ctx.n_layers - self.start, ctx.d_model // cfg.hidden_divisor, ctx.d_model, ctx.n_heads
        self.gate_RMD = nn.Parameter(torch.empty(R, M, D))  # W_g per re-positioning layer, stacked
        self.content_RMD = nn.Parameter(torch.empty(R, M, D))  # W_c
        self.final_RHM = nn.Parameter(torch.empty(R, H, M))  # W_z
        self.reset_parameters()

    def reset_parameters(self) -> None:
        std = self.ctx.init_std
        for weight in (self.gate_RMD, self.content_RMD, self.final_RHM):
            nn.init.trunc_normal_(weight, std=std, a=-3 * std, b=3 * std)

    def decay_params(self):
        # their AdamW decays every Linear weight (weight_decay 0.1), these three included; decay is elementwise, so
        # decaying the stacked tensors is decaying each layer's
        return [self.gate_RMD, self.content_RMD, self.final_RHM]

    @property
    def repositions(self) -> bool:
        """Whether the networks are in the forward: always without pe.rope_until, after its switch with it."""
        return self.cfg.rope_until is None or self.cfg.switched

    def drop(self):
        """The switch at pe.rope_until: the RoPE stage ends and the networks take over."""
        self.cfg = dataclasses.replace(self.cfg, switched=True)
        return self.cfg

    def token_positions(self, layer, x_BTD):
        """z (B, H, T) float32 for a re-positioning layer (positions are float32 under bf16 autocast, design
        rule); None below it, and on every layer before pe.rope_until's switch: RoPE at the token indices."""
        if layer < self.start or not self.repositions:
            return None
        r = layer - self.start
        x = x_BTD.float()
        hidden_BTM = F.silu(x @ self.gate_RMD[r].float().t()) * (x @ self.content_RMD[r].float().t())
        return (hidden_BTM @ self.final_RHM[r].float().t()).transpose(1, 2)


    class Speed(PESpeed):
        def layer_flops(self, layer, seq_len):
            if layer < self.pe.start:  # priced as the stage after the switch, the one evaluations run
                return 0.0, 0.0
            D, M, H = self.pe.ctx.d_model, self.pe.ctx.d_model // self.pe.cfg.hidden_divisor, self.pe.ctx.n_heads
            forward = 2 * (2 * D * M + M * H)  # the three projections, a multiply-add per weight
            return forward, 3 * forward
