"""TAPE, contextualized equivariant positional encoding (Zhu, Wang, Cai, Lee, Li, Wang, ICML 2025, arXiv 2501.00712;
the authors' code: VITA-Group/TAPE, models/llama/adape.py, `adape` there). RoPE's (cos, sin) of each token become
a per-token, per-head tensor E that every layer updates from content:
  attention  q and k are rotated by their token's E (rotate-half form, E no longer of unit norm), and the
             attention weights that mix the values also mix the states: E <- E + s_h (A E), s_h the row sum of an
             (H, H) matrix (the authors' einsum 'bqnd,qe->bqnd' keeps only the row sums), zero at init;
  MLP        E <- E + W_down (silu(W_x m) * (W_up E)), mixing heads through P channels (`position_size`), where m is
             the MLP's output; W_up zero at init, so an untrained TAPE is RoPE.
Training shifts every position by k ~ U{0..2 seq_len} (the authors' `AdaRotaryEmbedding.forward`).
Every update is linear in E per channel, so a shift of all positions rotates every E alike and the logits keep
RoPE's shift invariance. The state is kept once per frequency ([cos, sin], K channels, where the authors keep cos
and sin each K wide, duplicated halves: the same numbers); it rides beside v through the kernel (the weights
that mix v mix it) and in the KV cache, so decoding with a cache computes what a full pass does. The last layer's
updates feed nothing, so it has no update weights (the authors' are dead weights).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PEConfig, PositionalEncoding
from posbench.pe.speed import PESpeed


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] over the two halves of the channels (the authors' `rotate_half`)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


@PES.register("tape")
class TAPE(PositionalEncoding):
    kind = "rotary"
    summary = "TAPE: RoPE's (cos, sin) as per-token states that each layer's attention and MLP update from content"

    @dataclass
    class Config(PEConfig):
        theta: float = 10000.0  # config/adape.json: rope_theta absent, 10000
        position_size: int = 0  # P, the MLP update's width; 0: 4 per head (adape.json: 48 for 12 heads)
        train_shift: int | None = None  # largest training shift; None: 2 x model.seq_len (the authors' 2 x 1024)
        zero_init: bool = True  # W_up and the attention update zero at init (models/llama/adape.py `_init_weights`)

        def check(self) -> None:
            if not self.theta > 1:
                raise ConfigError(f"pe.theta must be > 1, got {self.theta}")
            if self.position_size < 0:
                raise ConfigError(f"pe.position_size must be >= 0 (0: 4 per head), got {self.position_size}")
            if self.train_shift is not None and self.train_shift < 0:
                raise ConfigError(f"pe.train_shift must be >= 0 or null (2 x model.seq_len), got {self.train_shift}")

    @classmethod
    def check_model(cls, cfg, ctx) -> None:
        if ctx.head_dim % 2:
            raise ConfigError(f"pe.name=tape rotates channel pairs: the head dim must be even, got {ctx.head_dim}")

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        H, D, K = ctx.n_heads, ctx.d_model, ctx.head_dim
        P, L = cfg.position_size or 4 * H, max(ctx.n_layers - 1, 0)  # the last layer's updates feed nothing
        self.shift = 2 * ctx.seq_len if cfg.train_shift is None else cfg.train_shift
        self.register_buffer("inv_freq", cfg.theta ** (-torch.arange(0, K, 2, dtype=torch.float32) / K),
                             persistent=False)
        std = ctx.init_std  # models/llama/adape.py `_init_weights`: every Linear N(0, 0.02), then the two zeroed
        self.post_LHH = nn.Parameter(torch.zeros(L, H, H))  # post_attention_linear
        self.up_LPH = nn.Parameter(torch.zeros(L, P, H))  # PELayer.up_proj
        self.x_LPD = nn.Parameter(torch.randn(L, P, D) * std)  # PELayer.x_proj
        self.down_LHP = nn.Parameter(torch.randn(L, H, P) * std)  # PELayer.down_proj
        if not cfg.zero_init:
            with torch.no_grad():
                self.post_LHH.normal_(0.0, std)
                self.up_LPH.normal_(0.0, std)

    def decay_params(self) -> list[nn.Parameter]:
        # the authors train with HF Trainer's AdamW (weight_decay 0.01), which decays every Linear weight
        return [self.post_LHH, self.up_LPH, self.x_LPD, self.down_LHP]

    def positions(self, T: int, device, offset: int = 0) -> torch.Tensor:
        # training: every position shifted by one k ~ U{0..shift} per forward (AdaRotaryEmbedding.forward)
        k = int(torch.randint(0, self.shift + 1, ())) if self.training and self.shift else 0
        return super().positions(T, device, offset) + k

    def start_state(self, pos_T: torch.Tensor) -> torch.Tensor:
        """(1 or B, 1, T, K) float32: [cos, sin] of RoPE's angles, the same for every head at the start."""
        angle = pos_T.float()[..., None] * self.inv_freq  # (T, K/2) or (B, T, K/2)
        state = torch.cat((angle.cos(), angle.sin()), dim=-1)
        return state[None, None] if state.dim() == 2 else state[:, None]

    def carry_in(self, layer, q_BHTK, k_BHTK, v_BHTK, state):
        if state is None:
            raise ValueError("pe `tape` carries its state from pe.start_state: it must be the model's PE")
        cos, sin = state.chunk(2, dim=-1)
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)  # the authors' duplicated halves

        def turn(x):
            x32 = x.float()
            return (x32 * cos + rotate_half(x32) * sin).to(x.dtype)

        B, H, T, _ = v_BHTK.shape
        v_BHTV = torch.cat((v_BHTK, state.expand(B, H, T, -1).to(v_BHTK.dtype)), dim=-1)
        return turn(q_BHTK), turn(k_BHTK), v_BHTV

    def carry_out(self, layer, out_BHTV, state):
        K = self.ctx.head_dim
        out_BHTK, mixed_BHTK = out_BHTV[..., :K], out_BHTV[..., K:].float()
        if layer >= self.post_LHH.shape[0]:
            return out_BHTK, state
        scale_H11 = self.post_LHH[layer].float().sum(-1)[:, None, None]
        return out_BHTK, state + scale_H11 * mixed_BHTK

    def carry_mlp(self, layer, mlp_BTD, state):
        if layer >= self.up_LPH.shape[0]:
            return state
        up_BPTK = torch.einsum("bhtk,ph->bptk", state, self.up_LPH[layer].float())
        gate_BPT1 = F.silu(mlp_BTD.float() @ self.x_LPD[layer].float().T).transpose(1, 2)[..., None]
        return state + torch.einsum("bptk,hp->bhtk", gate_BPT1 * up_BPTK, self.down_LHP[layer].float())

    def carry_bytes(self, layer: int, N: int) -> int:
        # float32: the state in, its attention share and the state out; in the MLP the P-wide state, gated, beside
        # the state and its update
        H, K, P = self.ctx.n_heads, self.ctx.head_dim, self.up_LPH.shape[1]
        return 4 * N * K * max(3 * H, 2 * P + 2 * H)


    class Speed(PESpeed):
        def layer_flops(self, layer: int, seq_len: int) -> tuple[float, float]:
            # A E over K more value channels (2 T H K), the MLP update (W_up, W_down: 2 H P K each; W_x: 2 D P)
            H, K, P, D = self.pe.ctx.n_heads, self.pe.ctx.head_dim, self.pe.up_LPH.shape[1], self.pe.ctx.d_model
            extra = 2.0 * seq_len * H * K + 4.0 * H * P * K + 2.0 * D * P
            return extra, 3 * extra
