"""Causal self-attention. Knows the PE only through its hooks, and the kernel only through its call.

Shape legend: B batch, T new tokens, S cached + new tokens, H heads, K head dim, D model dim.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from posbench.errors import ConfigError
from posbench.model.attention_gate import GATES
from posbench.model.attention_sinks import softmax_with_sinks
from posbench.model.attention_temperature import NoTemperature, Temperature, tempered_score_mod
from posbench.model.head_edit import KEEP
from posbench.model.kernels import AttentionKernel, EagerKernel
from posbench.model.norms import RMSNorm, UnitRMSNorm
from posbench.model.packing import Documents, DocumentState
from posbench.pe.encoding import LogitsMod, PositionalEncoding, attention_bias


@dataclass
class LayerCache:
    """Rotated keys, values and key positions seen so far by one layer (incremental decoding)."""

    k_BHSK: torch.Tensor | None = None
    v_BHSK: torch.Tensor | None = None
    pos_S: torch.Tensor | None = None
    feats_BHS: torch.Tensor | None = None  # the PE's token features of every key (pe.token_features), or None

    def extend_features(self, feats_BHT):
        if feats_BHT is not None:
            self.feats_BHS = feats_BHT if self.feats_BHS is None else torch.cat((self.feats_BHS, feats_BHT), dim=-1)
        return self.feats_BHS

    def extend(self, k_BHTK, v_BHTK, pos_T):
        if self.k_BHSK is None:
            self.k_BHSK, self.v_BHSK, self.pos_S = k_BHTK, v_BHTK, pos_T
        else:
            self.k_BHSK = torch.cat((self.k_BHSK, k_BHTK), dim=2)
            self.v_BHSK = torch.cat((self.v_BHSK, v_BHTK), dim=2)
            self.pos_S = torch.cat((self.pos_S, pos_T), dim=-1)  # (S,) or per row (B, S)
        return self.k_BHSK, self.v_BHSK, self.pos_S


@dataclass
class CarriedState:
    """The PE's per-token state between layers within one forward (pe.start_state; TAPE's positions, None for
    every other PE): attention and the block's MLP replace `value` through the PE's carry hooks."""

    value: torch.Tensor | None = None


@dataclass
class KVCache:
    layers: list[LayerCache] = field(default_factory=list)
    length: int = 0  # tokens already processed: the position offset of the next call
    documents: DocumentState | None = None  # with model.packing splitting documents: where the last one began

    @classmethod
    def empty(cls, n_layers: int) -> KVCache:
        return cls([LayerCache() for _ in range(n_layers)])


class Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, layer: int, kernel: AttentionKernel,
                 qk_norm: bool = True, norm_eps: float = 1e-6, dropout: float = 0.0, gate: str = "none",
                 sinks: bool = False, temperature: Temperature | None = None, qk_norm_weight: bool = True):
        super().__init__()
        self.n_heads, self.head_dim, self.layer = n_heads, d_model // n_heads, layer
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        # QK-norm (Dehghani et al. 2023): RMSNorm of each head's q and k, before the PE rotates them,
        # bounds logits and keeps bf16 training stable.
        # Without its weight (model.qk_norm_weight=false) the norm is Llama 4's L2Norm: RoPE rotates channel pairs,
        # which keeps a head's RMS, so normalising before the rotation equals Llama 4's normalising after it.
        norm = RMSNorm if qk_norm_weight else UnitRMSNorm
        self.q_norm = norm(self.head_dim, norm_eps) if qk_norm else nn.Identity()
        self.k_norm = norm(self.head_dim, norm_eps) if qk_norm else nn.Identity()
        self.resid_dropout = nn.Dropout(dropout)
        self.kernel = kernel
        self.gate = GATES.get(gate)(d_model, n_heads)  # model.attention_gate (model/attention_gate.py)
        # model.attention_sinks: one sink logit per head, 0 at init (model/attention_sinks.py); no parameter without
        self.sinks = nn.Parameter(torch.zeros(n_heads)) if sinks else None
        # model.attention_temperature (model/attention_temperature.py); `none` holds nothing and does nothing
        self.temperature = temperature if temperature is not None else NoTemperature(NoTemperature.Config(), 0, 0)
        # single heads' q and k changed after the rotation by an evaluation-time option (model/head_edit.py): none here
        self.head_edit = KEEP
        if sinks and not kernel.carries_sinks:
            raise ConfigError(f"model.attention={kernel.name} cannot carry model.attention_sinks; use auto, sdpa, "
                              "eager, sdpa_bias or flex")

    def _qkv(self, x_BTD, pos_T, pe: PositionalEncoding, cache: LayerCache | None, state=None):
        B, T, D = x_BTD.shape
        qkv = self.qkv(x_BTD).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        # unbind, not qkv[0], qkv[1], qkv[2]: the same views, but its backward stacks the three gradients
        # where three indexings would each fill a zero (3, B, H, T, K) tensor and sum them (~5% of a small
        # model's CPU step); the gradient values are the same
        q_BHTK, k_BHTK, v_BHTK = qkv.unbind(0)
        q_in_BHTK, k_in_BHTK = self.q_norm(q_BHTK), self.k_norm(k_BHTK)
        # a PE that reads its positions from the tokens (RePo) rotates at those; the cache keeps the window's
        token_pos_BHT = pe.token_positions(self.layer, x_BTD)
        q_BHTK, k_BHTK = pe.rotate(q_in_BHTK, k_in_BHTK, pos_T if token_pos_BHT is None else token_pos_BHT)
        # before the cache: a cached key is the edited one, so a decode step sees what a full forward sees
        q_BHTK, k_BHTK = self.head_edit(self.layer, q_in_BHTK, k_in_BHTK, q_BHTK, k_BHTK, pos_T)
        # a carried position state (TAPE) rotates q, k and rides beside v, so the cache keeps every key's
        q_BHTK, k_BHTK, v_BHTK = pe.carry_in(self.layer, q_BHTK, k_BHTK, v_BHTK, state)
        if cache is None:
            return q_BHTK, k_BHTK, v_BHTK, pos_T
        return (q_BHTK, *cache.extend(k_BHTK, v_BHTK, pos_T))

    def forward(self, x_BTD, pos_T, pe: PositionalEncoding, cache: LayerCache | None = None,
                docs: Documents | None = None, state: CarriedState | None = None):
        """`pos_T`: (T,) or per row (B, T); `docs`: the batch's documents (model/packing.py), None when windows
        are not split (the plain causal kernels); `state`: the PE's carried state (pe.start_state), updated here."""
        B, T, D = x_BTD.shape
        state = state or CarriedState()
        q, k, v, pos_S = self._qkv(x_BTD, pos_T, pe, cache, state.value)
        mod = attention_bias(pe, self.layer, pos_T, pos_S, self._features(x_BTD, pe, cache), k)
        fast = pe.speed.fast_bias(self.layer, pos_T, pos_S)
        if self.temperature.applies(pe.position_free):
            q, mod, fast = self._temper(q, mod, pos_T, pe)
        out_BHTK = self.kernel(q, k, v, mod, self.training, docs, fast, sinks_H=self.sinks)
        out_BHTK, state.value = pe.carry_out(self.layer, out_BHTK, state.value)
        out_BTHK = self.gate(x_BTD, out_BHTK.transpose(1, 2))
        return self.resid_dropout(self.proj(out_BTHK.reshape(B, T, D)))

    def scores(self, x_BTD, pos_T, pe: PositionalEncoding, docs: Documents | None = None,
               state: CarriedState | None = None) -> torch.Tensor:
        """Pre-softmax logits (B, H, T, T), float32, from the eager reference: for analysis and tests."""
        q, k, _, _ = self._qkv(x_BTD, pos_T, pe, None, state.value if state else None)
        mod = attention_bias(pe, self.layer, pos_T, pos_T, self._features(x_BTD, pe, None), k)
        if self.temperature.applies(pe.position_free):
            q, mod, _ = self._temper(q, mod, pos_T, pe)
        eager = EagerKernel(pe, "cpu", 0.0, self.kernel.window)  # this layer's sliding window, if any
        eager.chunk = self.kernel.chunk
        return eager.scores(q, k, mod, docs)

    def probs(self, x_BTD, pos_T, pe: PositionalEncoding, docs: Documents | None = None,
              state: CarriedState | None = None) -> torch.Tensor:
        """Attention probabilities (B, H, T, T) over the real keys, float32 (analysis): with sinks, a row sums to
        what the keys keep beside the sink's share; a row with no key allowed is 0."""
        s_BHTT = self.scores(x_BTD, pos_T, pe, docs, state)
        if self.sinks is None:
            return torch.softmax(s_BHTT, dim=-1).nan_to_num(0.0)
        return softmax_with_sinks(s_BHTT, self.sinks.float()).nan_to_num(0.0)

    def _temper(self, q_BHTK, mod, pos_T, pe: PositionalEncoding):
        """q times the temperature of its position, the bias (if any) likewise; no fast forms of the bias."""
        if isinstance(mod, LogitsMod):
            raise ConfigError(f"model.attention_temperature={self.temperature.cfg.name} cannot scale PE `{pe.name}`'s "
                              "logits_mod (it rewrites whole rows of logits); use model.attention_temperature=none")
        f_BHT1 = self.temperature.factor_BHT1(pos_T)
        q_BHTK = (q_BHTK.float() * f_BHT1).to(q_BHTK.dtype)
        return q_BHTK, None if mod is None else tempered_score_mod(mod, f_BHT1), None

    def _features(self, x_BTD, pe: PositionalEncoding, cache: LayerCache | None):
        """The PE's token features of every key (None for position-only PEs), cached ones first."""
        feats_BHT = pe.token_features(self.layer, x_BTD)
        return feats_BHT if cache is None else cache.extend_features(feats_BHT)
