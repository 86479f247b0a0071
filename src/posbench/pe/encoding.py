"""The positional-encoding contract every variant follows.

Shape legend: B batch, H heads, T query length, S key length, K head dim, D model dim.
Positions are shared by the batch, `pos_T` (T,), or per row, (B, T), when they restart at every document of a
packed window; every hook takes both (a 1-D `pos_T` is computed exactly as before).

A PE overrides only the hooks it uses; attention calls every hook every time and never asks which
PE it has:
  positions(T, device, offset)        -> pos_T   float32 positions (bf16 cannot hold ints > 256)
  document_positions(within_BT, doc_BT) -> pos_BT  per-row positions when they restart at each document
                                                   (model.packing.positions=document, model/packing.py)
  embed(x_BTD, pos_T)                 -> x_BTD   absolute PEs add to the token embeddings
  rotate(q_BHTK, k_BHTK, pos_T)       -> q, k    RoPE family rotates queries and keys
  score_mod(layer, pos_q_T, pos_k_S)  -> fn | None
      fn(score, b, h, q_idx, kv_idx) -> score, FlexAttention's signature; the eager kernel evaluates
      the same function on broadcast index grids, so one definition serves every kernel.
  layer_pe(layer)                     -> the PE a given layer uses (per-layer hybrids)
  layer_window(layer)                 -> int | None  the sliding window a PE asks of a layer's attention (RNoPE-SWA);
                                                   merged with model.attention_window (the smaller wins)
  drop()                              -> PEConfig  removes the positions for good, returns the config that now
                                                   describes the PE (DroPE); `can_drop` is derived from overriding it
  layer_flops(layer, seq_len)         -> (forward, train) FLOPs per token the PE adds to a layer (model/flops.py)
  data_positions(data_BT, default)    -> pos     what a task's own per-token ids (B, T) mean to this PE: most PEs
                                                 ignore them and use `default()` (abacus, coupled read them)
  decay_params()                      -> [Parameter]  the PE's parameters AdamW weight-decays (training/optim.py);
                                                 none by default: every PE parameter is exempt unless its PE lists
                                                 it (FoX's gate weight, as its authors decay it)
  qk_dim(head_dim)                    -> int     channels of the q and k `rotate` returns (PoPE: twice the head dim)
  logits_mod_bytes(B, H, T, S)        -> int     bytes `logits_mod` holds at its peak beyond the matrix it gets
      (the last two: what a layer's attention allocates, for evaluation's memory check, model/memory.py)

Data-dependent PEs (their bias depends on the tokens, not only on positions) use three more hooks; attention
calls them every time too, and the defaults make them no-ops:
  token_features(layer, x_BTD)        -> feats_BHT | None  float32 per head and token, read from the layer's
      attention input (FoX's log forget gates). Attention keeps them in the KV cache beside the keys, so a
      decoding step sees the features of every cached key.
  layer_score_mod(layer, pos_q_T, pos_k_S, feats_BHS) -> fn | LogitsMod | None   what attention hands the kernel:
      by default `score_mod`; FoX builds its bias from the keys' features; a PE with `logits_mod` gets a LogitsMod.
  logits_mod(layer, q_BHTK, s_BHTS)   -> s_BHTS  rewrites the whole (B, H, T, S) scaled logit matrix, future and
      masked keys already -inf, for biases that read other entries of the row (CoPE's positions sum gates over
      keys). Only the eager kernel can apply it; the kernels refuse such a PE otherwise (see has_logits_mod).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from posbench.registry import Registry

ScoreMod = Callable[..., torch.Tensor]


class LogitsMod:
    """A layer's `logits_mod` bound to its layer: fn(q_BHTK, s_BHTS) -> s_BHTS on the masked logit matrix. Handed to
    kernels in place of a score_mod; only the eager kernel accepts it."""

    def __init__(self, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
        self.fn = fn

    def __call__(self, q_BHTK: torch.Tensor, s_BHTS: torch.Tensor) -> torch.Tensor:
        return self.fn(q_BHTK, s_BHTS)


class PositionRangeError(ValueError):
    """An input is longer than the positions a PE is defined for (e.g. a learned table). Evaluation reports such a
    length as n/a; training turns it into a config error with `training_advice` (the fix is the config's)."""

    def __init__(self, message: str, pe: str = "", limit: int = 0, requested: int = 0):
        super().__init__(message)
        self.pe, self.limit, self.requested = pe, limit, requested

    def training_advice(self) -> str:
        return (f"training asks PE `{self.pe}` for {self.requested} positions (model.seq_len, or the data's own "
                f"position ids), but it is defined for 0..{self.limit - 1}: give pe.max_positions={self.requested} "
                "or more")


@dataclass
class PEConfig:
    """Base of every variant's `Config`; `name` selects the registered variant."""

    name: str = "rope"

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Validate this variant's own fields; raise ConfigError with what to change."""

    def drop_share(self) -> float | None:
        """The share of the training budget after which this PE is dropped when `schedule.drop_pe_at` does not
        say (DroPE's own default, so a study or sweep row `{name: drope}` is complete); None: never."""
        return None

    @classmethod
    def registry_lookup(cls, name: str, where: str = "pe") -> type[PEConfig]:
        return PES.config(name, where)


@dataclass(frozen=True)
class PEContext:
    """Model dimensions a PE needs; built from ModelConfig so pe/ does not import the run config."""

    d_model: int
    n_heads: int
    n_layers: int
    seq_len: int  # training context length
    init_std: float = 0.02  # std of the token embeddings at init (fixed tables scale themselves to it)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class PositionalEncoding(nn.Module):
    name: ClassVar[str] = ""
    # "absolute" (added to embeddings), "rotary", "bias" (logit bias), "context" (CoPE) or "none". Used for reports and
    # the shift-invariance contract test, never for control flow in model code.
    kind: ClassVar[str] = "none"
    summary: ClassVar[str] = ""
    Config: ClassVar[type[PEConfig]] = PEConfig

    def __init__(self, cfg: PEConfig, ctx: PEContext):
        super().__init__()
        self.validate(cfg, ctx)
        self.cfg = cfg
        self.ctx = ctx

    @classmethod
    def validate(cls, cfg: PEConfig, ctx: PEContext) -> None:
        """Checks that need the model's dimensions; called by config.resolve() before any work."""

    # None: defined at any length.
    @property
    def max_positions(self) -> int | None:
        return None

    @property
    def is_relative(self) -> bool:
        return self.kind != "absolute"

    def positions(self, T: int, device, offset: int = 0) -> torch.Tensor:
        pos_T = torch.arange(offset, offset + T, device=device, dtype=torch.float32)
        self.check_positions(offset + T)
        return pos_T

    def document_positions(self, within_BT: torch.Tensor, doc_BT: torch.Tensor) -> torch.Tensor:
        """(B, T) float32 positions when they restart at every document: `within_BT` is each token's index in its
        document, `doc_BT` its document's index in the row."""
        if within_BT.numel():
            self.check_positions(int(within_BT.max().item()) + 1)
        return within_BT.float()

    def check_positions(self, n_positions: int) -> None:
        limit = self.max_positions
        if limit is not None and n_positions > limit:
            raise PositionRangeError(
                f"PE `{self.name}` is defined for positions 0..{limit - 1}, but {n_positions} positions "
                f"were requested. Evaluate at most {limit} tokens, or train with a larger "
                f"`pe.max_positions`.", self.name, limit, n_positions)

    def data_positions(self, data_BT: torch.Tensor, default: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The positions this PE uses when the data carries its own per-token ids `data_BT` (B, T) (a task's digit
        places; design rule: position is data); `default()` makes the positions it would use otherwise (window or
        document positions, checked against `max_positions`), only when asked. Default: ignore the ids."""
        return default()

    @classmethod
    def reads_data_positions(cls) -> bool:
        """Whether the data's own position ids change what this PE computes: derived from the class overriding
        `data_positions`, never declared (the HF export refuses such PEs: it has no way to carry the ids)."""
        return cls.data_positions is not PositionalEncoding.data_positions

    def decay_params(self) -> list[nn.Parameter]:
        """The parameters of this PE (its own, not its members') that get the run's weight decay, as the model's
        matrices do. None by default: a table, bias or frequency that encodes *where* would be pulled toward NoPE,
        confounding the comparison. A PE lists one only where its authors decay it, and says where they do."""
        return []

    def embed(self, x_BTD: torch.Tensor, pos_T: torch.Tensor) -> torch.Tensor:
        return x_BTD

    def rotate(self, q_BHTK, k_BHTK, pos_T):
        return q_BHTK, k_BHTK

    def score_mod(self, layer: int, pos_q_T: torch.Tensor, pos_k_S: torch.Tensor) -> ScoreMod | None:
        return None

    def token_features(self, layer: int, x_BTD: torch.Tensor) -> torch.Tensor | None:
        return None

    def layer_score_mod(self, layer: int, pos_q_T: torch.Tensor, pos_k_S: torch.Tensor,
                        feats_BHS: torch.Tensor | None) -> ScoreMod | LogitsMod | None:
        if self.has_logits_mod:
            return LogitsMod(lambda q_BHTK, s_BHTS: self.logits_mod(layer, q_BHTK, s_BHTS))
        return self.score_mod(layer, pos_q_T, pos_k_S)

    def logits_mod(self, layer: int, q_BHTK: torch.Tensor, s_BHTS: torch.Tensor) -> torch.Tensor:
        return s_BHTS

    def qk_dim(self, head_dim: int) -> int:
        """Channels of the q and k that `rotate` returns for heads of `head_dim` channels (the values keep
        head_dim): a kernel's memory depends on it (torch's SDPA leaves its fused path when q is wider than v).
        Held to `rotate` by the contract test."""
        return head_dim

    def logits_mod_bytes(self, B: int, H: int, T: int, S: int) -> int:
        """Bytes `logits_mod` holds at once at its peak beyond the (B, H, T, S) matrix it is given, its result
        included, without autograd (model/memory.py). 0 for the identity, which allocates nothing."""
        return 0

    @property
    def has_score_mod(self) -> bool:
        """Whether this PE adds a logit bias: derived from the class overriding `score_mod` (or a data-dependent
        hook), never declared, so a new bias PE cannot forget it and silently run on a kernel that ignores biases.
        Known at construction, so attention picks its kernel once."""
        return overrides(type(self), "score_mod", "layer_score_mod", "logits_mod")

    @property
    def has_logits_mod(self) -> bool:
        """Whether the bias needs the whole logit matrix (`logits_mod`): only the eager kernel can run it."""
        return overrides(type(self), "logits_mod")

    @property
    def has_token_features(self) -> bool:
        """Whether the bias depends on the tokens (`token_features`): it differs per batch row."""
        return overrides(type(self), "token_features")

    def alibi_slopes(self) -> torch.Tensor | None:
        """Per-head slopes when the bias is exactly ALiBi's (lets flash-attn's ALiBi path run)."""
        return None

    def layer_pe(self, layer: int) -> PositionalEncoding:
        return self

    def layer_window(self, layer: int) -> int | None:
        """The sliding window this PE gives layer `layer`'s attention (None: full); read once at construction."""
        return None

    def drop(self) -> PEConfig:
        """Remove the positional information (DroPE's schedule step, training/loop.py); returns the config that
        rebuilds the PE as it is now, which the checkpoint saves."""
        raise TypeError(f"PE `{self.name}` cannot drop its positions")

    @classmethod
    def can_drop(cls) -> bool:
        """Derived from the class overriding `drop`, as `has_score_mod` is: checked before training starts."""
        return cls.drop is not PositionalEncoding.drop

    def layer_flops(self, layer: int, seq_len: int) -> tuple[float, float]:
        """(forward, training step) FLOPs per token this PE adds to one layer beyond the model's matmul estimate
        (model/flops.py): wider q.k products (PoPE), frequency mixtures (FoPE), gates and their row sums (FoX,
        CoPE), pairwise work over the `seq_len` keys the layer scores. (0, 0) for a PE whose cost is negligible
        next to attention (a bias lookup, a rotation)."""
        return 0.0, 0.0

    def extra_repr(self) -> str:
        return f"name={self.name}"


def overrides(cls, *hooks: str) -> bool:
    """Whether a PE class overrides any of these hooks of the base contract."""
    return any(getattr(cls, hook) is not getattr(PositionalEncoding, hook) for hook in hooks)


def reads_tokens(cls) -> bool:
    """Whether a PE class is data-dependent (reads the layer input or the whole logit matrix): such a PE is defined
    for causal self-attention only (model/attention.py), not for the encoder-decoder's bidirectional encoder."""
    return overrides(cls, "token_features", "layer_score_mod", "logits_mod")


def _check(name: str, cls) -> None:
    if not issubclass(cls.Config, PEConfig):
        raise TypeError(f"{cls.__name__}.Config must subclass PEConfig")
    if not cls.summary:
        raise TypeError(f"{cls.__name__} needs a one-line `summary`")


# Name -> PositionalEncoding class. Variants register with `@PES.register("name")` in their own file;
# pe/__init__.py imports every variant file explicitly, so `grep PES.register` finds them all.
PES = Registry("positional encoding", _check, where="pe.name",
               hint=". List them with `python train.py --list-pe-types`.")
