"""Selective RoPE (Movahedi, Carstensen et al., ICLR 2026, arXiv 2511.17388): rotary embeddings whose angles are
input-dependent. Per layer, head and channel pair p, a token's phase increment is read from the layer's input and
summed over the tokens so far; query i and key j turn by temperature_p x their cumulative phase:

    phi_t = conv(W_up W_down l2norm_heads(x_t)),   Phi_t = sum_{s<=t} phi_s,   angle_tp = tau_p Phi_tp

Facts from the authors' code (timurcarstensen/selective-rope, commit d12e825; src/selective_rope/modules/rotary.py):
x split into n_heads chunks, each L2-normalised (line 204; fla's l2_norm: x / sqrt(sum x^2 + 1e-6)); a low-rank
projection d_model -> rank -> H*K/2 without biases (lines 105-109); a causal depthwise convolution of width 4,
no bias, no activation (lines 115-122, fla ShortConvolution); the inclusive cumulative sum (line 298); the
temperature tau_p = temp_max / theta^(2p/K), fixed (lines 32-37, 130-133); channel p turns with p + K/2 by +angle
(lines 307-318). Defaults of their language-model preset
(configs/language_modeling/model/position_embedding/selective_rope.yaml): theta 500000, temp_max 1, rank 32,
the convolution on, no phase gate and no phase bias.
Init (models/transformer/modeling.py `_init_weights`, lines 120-125): every Linear and Conv1d weight ~ N(0, 0.02).
Weight decay: their trainer hands every parameter to AdamW (train_language_modeling.py lines 531-538), so
`decay_params` lists them all.

The rotation reads the tokens, which `rotate` cannot, so it runs in `logits_mod` (pe/token_rotation.py): eager
kernel only. The KV cache keeps the raw keys and, as token features, each token's projection before the
convolution (B, H, K/2, S); each call redoes the convolution and the sum over every cached token. The convolution
restarts at a document start seen in the call (model.packing.mask=document; the authors restart per sequence,
cu_seqlens), as PaTH's does (pe/path.py `segments`).
Shape legend: B batch, H heads, T queries (the last T of the S keys), S keys, K head dim, P = K/2, D model dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PEConfig, PositionalEncoding
from posbench.pe.path import segments
from posbench.pe.rope import require_channel_pairs
from posbench.pe.speed import PESpeed
from posbench.pe.token_rotation import rotated_logits, rotated_logits_bytes

L2_EPS = 1e-6  # fla's l2_norm


@PES.register("selective_rope")
class SelectiveRoPE(PositionalEncoding):
    kind = "rotary"
    summary = "Selective RoPE: rotary angles from a cumulative, input-dependent phase per channel pair " \
              "(Movahedi et al. 2026; eager only)"

    @dataclass
    class Config(PEConfig):
        theta: float = 500000.0  # temperature base: tau_p = temp_max / theta^(2p/K)
        temp_max: float = 1.0
        rank: int = 32  # the phase projection's bottleneck
        conv: int = 4  # width of the causal depthwise convolution over the phases

        def check(self) -> None:
            if not self.theta > 1:
                raise ConfigError(f"pe.theta must be > 1, got {self.theta}")
            if not self.temp_max > 0:
                raise ConfigError(f"pe.temp_max must be > 0, got {self.temp_max}")
            if self.rank < 1 or self.conv < 1:
                raise ConfigError(f"pe.rank and pe.conv must be >= 1, got {self.rank} and {self.conv}")

    @classmethod
    def check_model(cls, cfg, ctx):
        require_channel_pairs(cfg, ctx)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        L, D, W = ctx.n_layers, ctx.d_model, ctx.n_heads * ctx.head_dim // 2
        self.down_LRD = nn.Parameter(torch.empty(L, cfg.rank, D))
        self.up_LWR = nn.Parameter(torch.empty(L, W, cfg.rank))
        self.conv_LWC = nn.Parameter(torch.empty(L, W, cfg.conv))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for weight in (self.down_LRD, self.up_LWR, self.conv_LWC):
            nn.init.normal_(weight, std=self.ctx.init_std)

    def decay_params(self):
        return [self.down_LRD, self.up_LWR, self.conv_LWC]

    def temperature(self, device) -> torch.Tensor:
        """(P,) tau_p = temp_max / theta^(2p/K), float32."""
        K = self.ctx.head_dim
        return self.cfg.temp_max / self.cfg.theta ** (torch.arange(0, K, 2, device=device, dtype=torch.float32) / K)

    def token_features(self, layer, x_BTD):
        """(B, H, P, T) float32: each token's phase projection before the convolution."""
        B, T, D = x_BTD.shape
        H = self.ctx.n_heads
        x = x_BTD.float().view(B, T, H, D // H)
        x = (x * torch.rsqrt(x.square().sum(-1, keepdim=True) + L2_EPS)).view(B, T, D)
        pre_BTW = (x @ self.down_LRD[layer].float().t()) @ self.up_LWR[layer].float().t()
        return pre_BTW.view(B, T, H, -1).permute(0, 2, 3, 1)

    def angles(self, layer, feats_BHPS, seg_BS):
        """(B, H, S, P) angle of every key: the causal convolution within each segment, the cumulative sum, tau."""
        B, H, P, S = feats_BHPS.shape
        pre_BWS = feats_BHPS.reshape(B, H * P, S)
        weight_WC = self.conv_LWC[layer].float()
        C = weight_WC.shape[-1]
        phi_BWS = torch.zeros_like(pre_BWS)
        for back in range(C):  # weight[C - 1] on the token itself, as nn.Conv1d with causal padding
            same_BS = F.pad(seg_BS, (back, 0), value=-1)[:, :S] == seg_BS
            phi_BWS = phi_BWS + weight_WC[:, C - 1 - back, None] * F.pad(pre_BWS, (back, 0))[..., :S] \
                * same_BS[:, None]
        Phi_BHSP = phi_BWS.view(B, H, P, S).cumsum(-1).transpose(-1, -2)
        return Phi_BHSP * self.temperature(feats_BHPS.device)

    def logits_mod(self, layer, q_BHTK, s_BHTS, k_BHSK=None, feats_BHS=None):
        with torch.autocast(q_BHTK.device.type, enabled=False):  # angles grow with the sum: float32
            angle_BHSP = self.angles(layer, feats_BHS.float(), segments(s_BHTS))
            return rotated_logits(q_BHTK, k_BHSK, s_BHTS, angle_BHSP)


    class Speed(PESpeed):
        def logits_mod_bytes(self, B, H, T, S):
            # the convolution's terms and the sum, (S, P) per head a few at once, then the rotation and rescoring
            K = self.pe.ctx.head_dim
            return 4 * B * H * 3 * S * K + rotated_logits_bytes(B, H, T, S, K)

        def layer_flops(self, layer, seq_len):
            # per token: the two projections through the rank, the convolution and the sum over H*P channels, the
            # rotation of q and k (6 per channel); per head and key the rescoring q'.k' (2K), which the kernel's
            # q.k already counts once
            H, K, D, R = self.pe.ctx.n_heads, self.pe.ctx.head_dim, self.pe.ctx.d_model, self.pe.cfg.rank
            W = H * K // 2
            forward = 2 * D * R + 2 * R * W + (2 * self.pe.cfg.conv + 2) * W + 12 * H * K + 2 * H * K * seq_len
            return forward, 3 * forward
