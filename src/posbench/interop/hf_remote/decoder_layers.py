"""The decoder's layers in posbench's remote code (torch and the modules beside this file): pre-norm blocks of
attention and SwiGLU, with posbench's parameter names.

Attention is the explicit-softmax reference in float32, as posbench's eager kernel: q and k from `rotate`, the
logits plus the PE's `score_mod` evaluated on broadcast index grids, masked (the mask is the caller's:
modeling_posbench.py), then its `logits_mod` (CoPE), as posbench's `attention_bias` hands them over.
The KV cache (transformers' DynamicCache) holds rotated keys, as posbench's does; a PE's token features (FoX's log
forget gates) ride in it as one more key channel, so every cache operation keeps them with their keys.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .attention_options import Gate, Temperature, UnitRMSNorm
from .configuration_posbench import PosbenchConfig
from .padded_rows import rows_features, rows_rotate
from .pe_zoo import LogitsMod, attention_bias


def score_grids(B: int, H: int, T: int, S: int, device) -> tuple[torch.Tensor, ...]:
    """FlexAttention's (b, h, q_idx, kv_idx) as broadcast grids (B,1,1,1), (1,H,1,1), (1,1,T,1), (1,1,1,S)."""
    return (torch.arange(B, device=device)[:, None, None, None], torch.arange(H, device=device)[None, :, None, None],
            torch.arange(T, device=device)[None, None, :, None], torch.arange(S, device=device)[None, None, None, :])


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: PosbenchConfig, qk_norm: bool):
        super().__init__()
        D = cfg.hidden_size
        self.n_heads, self.head_dim = cfg.num_attention_heads, D // cfg.num_attention_heads
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        norm = RMSNorm if getattr(cfg, "qk_norm_weight", True) else UnitRMSNorm
        self.q_norm = norm(self.head_dim, cfg.rms_norm_eps) if qk_norm else nn.Identity()
        self.k_norm = norm(self.head_dim, cfg.rms_norm_eps) if qk_norm else nn.Identity()
        gate = getattr(cfg, "attention_gate", "none")
        if gate != "none":
            self.gate = Gate(D, self.n_heads, gate)
        if getattr(cfg, "attention_sinks", False):
            self.sinks = nn.Parameter(torch.zeros(self.n_heads))
        self.temperature = Temperature(getattr(cfg, "attention_temperature", None) or {"name": "none"}, self.n_heads,
                                       cfg.max_position_embeddings)

    def forward(self, x_BTD, pos_BT, pos_BS, allowed_BTS, pe, layer: int, cache, keep_BT):
        """pos_BT, pos_BS: the positions of the new tokens and of every key, cached and new, (T,) and (S,) shared by
        the batch or per row; allowed_BTS: which keys each query sees; keep_BT: the new tokens that are real (None:
        all), for a left-padded batch."""
        B, T, D = x_BTD.shape
        qkv = self.qkv(x_BTD).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = rows_rotate(pe, self.q_norm(qkv[0]), self.k_norm(qkv[1]), pos_BT, keep_BT)
        v = qkv[2]
        # (B, H, T), or (B, H, F, T): F channels a token (PaTH)
        feats_BHT = rows_features(pe, layer, x_BTD, keep_BT)
        if feats_BHT is not None:  # cached beside the keys, as one more channel each
            per_token = feats_BHT[..., None] if feats_BHT.dim() == 3 else feats_BHT.transpose(-1, -2)
            k = torch.cat((k, per_token.to(k.dtype)), dim=-1)
        if cache is not None:
            k, v = cache.update(k, v, layer)
        feats_BHS = None
        if feats_BHT is not None:
            n_feats = 1 if feats_BHT.dim() == 3 else feats_BHT.shape[2]
            k, feats_BSF = k[..., :-n_feats], k[..., -n_feats:]
            feats_BHS = feats_BSF[..., 0] if feats_BHT.dim() == 3 else feats_BSF.transpose(-1, -2)
        S = pos_BS.shape[-1]
        if k.shape[2] != S:
            # a cache that returns preallocated slots (StaticCache) would have the padding slots attended
            raise ValueError(f"the cache returned {k.shape[2]} keys for {S} tokens; modeling_posbench.py supports "
                             "transformers' DynamicCache only (leave cache_implementation unset)")
        tempered = self.temperature.applies(pe.kind == "none")  # as posbench's model/attention.py asks
        f_BHT1 = self.temperature.factor_BHT1(pos_BT) if tempered else None
        if tempered:  # q times its position's factor: q . k scaled, the keys (cached) untouched
            q = (q.float() * f_BHT1).to(q.dtype)
        # over the width rotate returns (qk_dim: PoPE doubles it and scales q to match), as posbench's kernels do
        s_BHTS = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        mod = attention_bias(pe, layer, pos_BT, pos_BS, feats_BHS, k)  # a score_mod, a LogitsMod or None
        if mod is not None and not isinstance(mod, LogitsMod):  # on broadcast index grids, as posbench's eager kernel
            biased = mod(s_BHTS, *score_grids(B, self.n_heads, T, S, s_BHTS.device))
            # a temperature scales the bias too
            s_BHTS = biased if not tempered else s_BHTS + (biased - s_BHTS) * f_BHT1
        s_BHTS = s_BHTS.masked_fill(~allowed_BTS[:, None], float("-inf"))
        if isinstance(mod, LogitsMod):  # the whole masked row (CoPE, PaTH, stick-breaking)
            s_BHTS = mod(q, s_BHTS)
        if hasattr(self, "sinks"):  # a virtual key of logit sinks[h] and value 0 (posbench's attention_sinks.py)
            sink_BHT1 = self.sinks.float().view(1, -1, 1, 1).expand(B, self.n_heads, T, 1)
            p_BHTS = torch.softmax(torch.cat((s_BHTS, sink_BHT1), dim=-1), dim=-1)[..., :-1]
        else:
            p_BHTS = torch.softmax(s_BHTS, dim=-1)
        out_BTHK = (p_BHTS @ v.float()).to(x_BTD.dtype).transpose(1, 2)
        if hasattr(self, "gate"):
            out_BTHK = self.gate(x_BTD, out_BTHK)
        return self.proj(out_BTHK.reshape(B, T, D))


class SwiGLU(nn.Module):
    def __init__(self, cfg: PosbenchConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg: PosbenchConfig, qk_norm: bool):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg, qk_norm)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg)

    def forward(self, x, pos_BT, pos_BS, allowed_BTS, pe, layer, cache, keep_BT):
        x = x + self.attn(self.attn_norm(x), pos_BT, pos_BS, allowed_BTS, pe, layer, cache, keep_BT)
        return x + self.mlp(self.mlp_norm(x))
