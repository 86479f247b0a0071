"""GRAPE-M, multiplicative GRAPE (Group Representational Position Encoding, ICLR 2026, arXiv 2512.07805): position
acts on q and k as a product of commuting 2x2 rotations on the canonical planes (the paper's section 3.1),
G_t = exp(t L), with one learnable frequency per plane; the contextual form (Type I) replaces t by a cumulative
phase read from the tokens, G_t = exp(Phi_t L), so the relative law G_i^T G_j = exp((Phi_j - Phi_i) L) still holds.

Facts from the authors' code (model-architectures/GRAPE, commit f5b539f):
- `grape_m` (model/llama-mha-grape-m-nonctx.py): frequencies initialised as RoPE's, 10000^(-2j/K) (line 87),
  stored as 16 log f (`grape_log_freq_scale` 16, line 316; init line 88) and read as exp(stored / 16) (lines
  112-121), which divides their effective learning rate by 16; one spectrum shared by all heads (line 315),
  learnable (line 314); one spectrum per layer (each attention layer builds its own, line 195). Each layer is
  posbench's RotaryBase with its frequencies, so pe.scaling and pe.rotary_fraction apply as to every rotary PE.
- `grape_m_ctx` (model/llama-mha-grape-m-ctx.py): frequencies as above but stored as log f without the scale
  (lines 80-104); omega_t = sigmoid((w . x_t + b) / 16), one scalar per token shared by the heads (lines 185-193,
  219; `grape_ctx_per_head` False, line 328), from the attention input (after the pre-norm, line 293); w = 0 and
  b = log(expm1(1e-3)) (lines 195-199: a softplus inverse, then read through a sigmoid, so omega starts at
  sigmoid(-6.9 / 16) = 0.39, not 1e-3); Phi_t = sum_{s<t} omega_s, exclusive (line 221).
Both rotate by -angle (x1 cos + x2 sin, line 38/45); posbench by +angle as every rotary PE, the same set of models
(negate one channel of each pair in W_q and W_k, as `modded_rope`). Weight decay: their optimizer decays every
parameter but RMSNorm weights (optim_utils.py lines 8-30, train_adam_finewebedu.py line 457), so `decay_params`
lists the frequencies and the phase gate.
Shape legend: B batch, H heads, T queries, S keys, K head dim, P = K/2, D model dim, L layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PEConfig, PositionalEncoding
from posbench.pe.layer_view import LayerView
from posbench.pe.rope import RopeConfig, RotaryBase, require_channel_pairs, rope_inv_freq
from posbench.pe.speed import PESpeed
from posbench.pe.token_rotation import rotated_logits, rotated_logits_bytes


@PES.register("grape_m")
class GrapeM(RotaryBase):
    summary = "GRAPE-M: commuting planar rotations with learnable log-frequencies per layer from RoPE's (GRAPE, " \
              "ICLR 2026)"

    @dataclass
    class Config(RopeConfig):
        log_freq_scale: float = 16.0  # stored 16 log f, read exp(stored / 16): the frequencies learn 16x slower

        def check(self) -> None:
            super().check()
            if not self.log_freq_scale > 0:
                raise ConfigError(f"pe.log_freq_scale must be > 0, got {self.log_freq_scale}")

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        # one spectrum per layer, as each of the authors' attention layers builds its own
        # (model/llama-mha-grape-m-nonctx.py line 195)
        stored_P = self.initial_inv_freq().log() * cfg.log_freq_scale
        self.log_freq_LP = nn.Parameter(stored_P.repeat(ctx.n_layers, 1))
        # a per-layer view each; a plain list, not submodules: the parameter stays here, saved and moved as `pe`
        self.layer_views = [GrapeMLayer(self, i) for i in range(ctx.n_layers)]

    def layer_pe(self, layer):
        return self.layer_views[layer]

    def inv_freq(self, layer: int = 0):
        return torch.exp(self.log_freq_LP[layer] / self.cfg.log_freq_scale)

    def set_scaling(self, scaling) -> None:
        super().set_scaling(scaling)
        for view in getattr(self, "layer_views", []):  # RotaryBase.__init__ sets it before the views exist
            view.set_scaling(scaling)

    def decay_params(self):
        return [self.log_freq_LP]


class GrapeMLayer(LayerView, RotaryBase):
    """Layer `layer` of GRAPE-M: RotaryBase's rotation with that layer's learned frequencies. It holds no tensors of
    its own and is no submodule of the owner (the model's `pe`), so state dict and device moves stay on the owner."""


    def inv_freq(self):
        return self.owner.inv_freq(self.layer)

    def extra_repr(self) -> str:
        return f"name={self.name}, layer={self.layer}"


@PES.register("grape_m_ctx")
class GrapeMContextual(PositionalEncoding):
    kind = "rotary"
    summary = "GRAPE-M contextual (Type I): rotations by a cumulative token-gated phase, learnable frequencies " \
              "(GRAPE, ICLR 2026; eager only)"

    @dataclass
    class Config(PEConfig):
        theta: float = 10000.0  # the frequencies' init: theta^(-2j/K)
        omega_scale: float = 16.0  # omega = sigmoid(logit / 16)
        init_omega: float = 1e-3  # the gate's bias is softplus^-1(1e-3), read through the sigmoid

        def check(self) -> None:
            if not self.theta > 1:
                raise ConfigError(f"pe.theta must be > 1, got {self.theta}")
            if not self.omega_scale > 0 or not self.init_omega > 0:
                raise ConfigError(f"pe.omega_scale and pe.init_omega must be > 0, got {self.omega_scale} and "
                                  f"{self.init_omega}")

    @classmethod
    def check_model(cls, cfg, ctx):
        require_channel_pairs(cfg, ctx)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        L, D = ctx.n_layers, ctx.d_model
        self.log_freq_LP = nn.Parameter(rope_inv_freq(ctx.head_dim, cfg.theta).log().repeat(L, 1))
        self.gate_LD = nn.Parameter(torch.zeros(L, D))
        self.gate_bias_L = nn.Parameter(torch.full((L,), math.log(math.expm1(cfg.init_omega))))

    def decay_params(self):
        return [self.log_freq_LP, self.gate_LD, self.gate_bias_L]

    def token_features(self, layer, x_BTD):
        """(B, H, T) float32: omega_t, the same for every head."""
        logit_BT = x_BTD.float() @ self.gate_LD[layer].float() + self.gate_bias_L[layer].float()
        omega_BT = torch.sigmoid(logit_BT / self.cfg.omega_scale)
        return omega_BT[:, None].expand(-1, self.ctx.n_heads, -1)

    def logits_mod(self, layer, q_BHTK, s_BHTS, k_BHSK=None, feats_BHS=None):
        with torch.autocast(q_BHTK.device.type, enabled=False):
            omega_BHS = feats_BHS.float()
            Phi_BHS = omega_BHS.cumsum(-1) - omega_BHS  # exclusive: the tokens before
            angle_BHSP = Phi_BHS[..., None] * self.log_freq_LP[layer].float().exp()
            return rotated_logits(q_BHTK, k_BHSK, s_BHTS, angle_BHSP)


    class Speed(PESpeed):
        def logits_mod_bytes(self, B, H, T, S):
            return 4 * B * H * 2 * S + rotated_logits_bytes(B, H, T, S, self.pe.ctx.head_dim)

        def layer_flops(self, layer, seq_len):
            # the gate (2D), per head and key the rotation of q and k (6 per channel) and the rescoring q'.k' (2K)
            H, K, D = self.pe.ctx.n_heads, self.pe.ctx.head_dim, self.pe.ctx.d_model
            forward = 2 * D + 12 * H * K + 2 * H * K * seq_len
            return forward, 3 * forward
