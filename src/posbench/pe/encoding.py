"""The positional-encoding contract every variant follows, in two layers.

Shape legend: B batch, H heads, T query length, S key length, K head dim, D model dim.
Positions are shared by the batch, `pos_T` (T,), or per row, (B, T), when they restart at every document of a
packed window; every hook takes both.

The meaning is what a PE author writes: where positions come from, what they do to the embeddings, to q and k, and
to the logits (`HOOKS`, on PositionalEncoding). Speed and accounting (fast forms for the kernels, qk width, memory,
FLOPs) are the second layer, optional: a provider the PE names (`Speed`, pe/speed.py `SPEED`), whose every member
defaults from the meaning, so a PE written with the meaning alone is exact and merely slower, priced conservatively.
A PE overrides only the hooks it uses; model code calls the hooks (and `layer_pe(layer).speed`) and never asks which
PE it has. The tables are the contract as data, with the classes in pe/ that override each member
(tests/pe/test_pe_hooks.py holds them, and docs/architecture.md's copy, to the code). "Called on": the object the
model calls the hook on. The model's PE (`model.pe`) answers for the whole model: positions, embeddings, which PE
each layer uses (`layer_pe`) and each layer's window. `layer_pe(layer)` answers for one layer's attention:
everything between q, k and the softmax, and its `speed`. Every PE module (hybrid members, a wrapper's inner PE)
answers `decay_params`; the class answers `check_model` before any instance exists.

  meaning hook                                        called on        default
        overridden in
  check_model(cfg, ctx)                               class            -
        DigitsPE, GrapeMContextual, HybridPerLayer, ModdedNanoGPTRoPE, RNoPESWA, RePo, RotaryBase, SelectiveRoPE,
        SeqPE, SinInitPE, SinusoidalPE, TAPE, WrapperPE
  max_positions                                       model.pe         None
        Abacus, CoupledPositions, DigitsPE, HybridPerLayer, IntegerPE, LearnedPE, RandomizedPositions, SeqPE,
        WrapperPE
  is_relative                                         model.pe         true without embed
        FIRE, FoPE, FoPELayer, HybridPerLayer, WrapperPE
  positions(T, device, offset)                        model.pe         offset .. offset+T-1
        CoupledPositions, RandomizedPositions, SeqPE, TAPE, WrapperPE
  document_positions(within_BT, doc_BT)               model.pe         index in its document
        RandomizedPositions, WrapperPE
  data_positions(data_BT, default)                    model.pe         default(): ids ignored
        Abacus, CoupledPositions
  embed(x_BTD, pos_T)                                 model.pe         identity
        Abacus, FixedTablePE, LearnedPE, SeqPE, WrapperPE
  layer_pe(layer)                                     model.pe         self
        FoPE, GrapeM, HybridPerLayer, WrapperPE
  layer_window(layer)                                 model.pe         None: full attention
        RNoPESWA, WrapperPE
  drop()                                              model.pe         raises: cannot drop
        DroPE, RePo
  decay_params()                                      each PE module   []: no decay
        ForgetGate, GrapeA, GrapeAP, GrapeM, GrapeMContextual, RePo, SelectiveRoPE, TAPE
  rotate(q_BHTK, k_BHTK, pos_T)                       layer_pe(layer)  identity
        DroPE, FoPE, FoPELayer, PoPE, RotaryBase, SeqPE
  score_mod(layer, pos_q_T, pos_k_S, feats_BHS=None)  layer_pe(layer)  None: no bias
        BiasPE, ForgetGate
  token_positions(layer, x_BTD)                       layer_pe(layer)  None: pos_T
        RePo
  token_features(layer, x_BTD)                        layer_pe(layer)  None
        ForgetGate, GrapeAP, GrapeMContextual, PaTH, SelectiveRoPE
  logits_mod(layer, q_BHTK, s_BHTS, k_BHSK, feats_BHS)layer_pe(layer)  identity, never called
        CoPE, GrapeA, GrapeAP, GrapeMContextual, PaTH, SelectiveRoPE, StickBreaking
  start_state(pos_T)                                  model.pe         None: no state
        TAPE, WrapperPE
  carry_in(layer, q_BHTK, k_BHTK, v_BHTK, state)      layer_pe(layer)  identity
        TAPE
  carry_out(layer, out_BHTV, state)                   layer_pe(layer)  identity
        TAPE
  carry_mlp(layer, mlp_BTD, state)                    layer_pe(layer)  identity
        TAPE
  carry_bytes(layer, N)                               layer_pe(layer)  0
        TAPE
  aux_loss(pos_T)                                     model.pe         None: no objective
        SeqPE, WrapperPE

  speed and accounting (pe.speed)                     derived default
        provided by
  fast_bias(layer, pos_q_T, pos_k_S)                  None: kernels evaluate score_mod
        ALiBi.Speed, BiasSpeed, FIRESpeed, RelativeLearnedBias.Speed, T5Bias.Speed
  qk_dim(head_dim)                                    the width rotate returns
        FoPELayer.Speed, SeqPE.Speed
  logits_mod_bytes(B, H, T, S)                        16 logit matrices with a logits_mod, else 0
        CoPE.Speed, GrapeA.Speed, GrapeAP.Speed, GrapeMContextual.Speed, PaTH.Speed, SelectiveRoPE.Speed,
        StickBreaking.Speed
  layer_flops(layer, seq_len)                         (0, 0): not counted
        CoPE.Speed, FoPE.Speed, FoPELayer.Speed, ForgetGate.Speed, GrapeA.Speed, GrapeAP.Speed,
        GrapeMContextual.Speed, PaTH.Speed, PoPE.Speed, RePo.Speed, SelectiveRoPE.Speed, SeqPE.Speed,
        StickBreaking.Speed, TAPE.Speed

What each hook means (each method's docstring has the details):
  max_positions / positions / document_positions: float32 positions (bf16 cannot hold ints > 256), per row when
      they restart at each document (model.packing.positions=document, model/packing.py); `PositionRangeError`
      past max_positions. data_positions: what a task's own per-token ids mean to the PE (abacus, coupled).
  embed: absolute PEs add to the token embeddings. rotate: the RoPE family rotates q and k;
      token_positions: positions per head read from the layer's input (RePo), rotated at instead of pos_T.
  score_mod: the logit bias as a FlexAttention score_mod fn(score, b, h, q_idx, kv_idx); a data-dependent bias
      (FoX) reads `feats_BHS`, the `token_features` of every key, which attention keeps in the KV cache.
  logits_mod: CoPE's positions sum gates over a whole row, which no elementwise score_mod can express, so it
      rewrites the masked logit matrix, on the eager kernel only (`attention_bias` hands it over as a LogitsMod
      bound to the keys and their token features, which PaTH transforms per query).
  layer_pe / layer_window: per-layer hybrids, and the sliding window a PE asks of a layer (RNoPE-SWA), merged
      with model.attention_window (the smaller wins). decay_params: the PE parameters AdamW weight-decays (none by
      default). drop: the PE's switch at its point of the budget (DroPE removes the positions for good; RePo's
      networks take over from RoPE), returning the config that now describes the PE.
And each speed member (pe/speed.py): fast_bias, one typed object (pe/fast_bias.py `FastBias`: a table by distance,
per-row evaluation, a far field, ALiBi's slopes) the kernels read instead of evaluating score_mod, None changing no
result (every bias PE gets the table by distance from its `bias`: pe/bias_speed.py); qk_dim, the width of the q and
k rotate returns; logits_mod_bytes, what logits_mod holds at its peak (model/memory.py); layer_flops, (forward,
train) FLOPs per token the PE adds to a layer (model/flops.py).
Derived, never declared (so a new PE cannot forget them): has_score_mod, has_logits_mod, has_token_features,
can_drop, reads_data_positions, position_free (`DERIVED`), from which hooks a class overrides; model code asks
these, never `kind`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from posbench.config_loader import Checked, require
from posbench.pe.speed import SPEED, PESpeed
from posbench.registry import Registry

ScoreMod = Callable[..., torch.Tensor]
# the hooks that carry positions into the model: a PE overriding none of them is position-free (`position_free`)
CARRIES_POSITIONS = ("embed", "rotate", "score_mod", "logits_mod")


class LogitsMod:
    """A layer's `logits_mod` bound to its layer, its keys and their token features: fn(q_BHTK, s_BHTS) -> s_BHTS on
    the masked logit matrix. Handed to kernels in place of a score_mod; only the eager kernel accepts it."""

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
class PEConfig(Checked):
    """Base of every variant's `Config`; `name` selects the registered variant."""

    name: str = "rope"
    # a PE that switches at a point of the budget (`drop_share`): the setting that places it, as a user writes it,
    # and what the model trains as after it, for the loop's and the plan's messages
    switch_setting: ClassVar[str] = ""
    switch_after: ClassVar[str] = ""

    def check(self) -> None:
        """Validate this variant's own fields; raise ConfigError with what to change."""

    def drop_share(self) -> float | None:
        """The share of the training budget at which this PE switches, a PE that changes at a point of the budget
        (DroPE's `pe.drop_at`: RoPE is dropped; RePo's `pe.rope_until`: its networks take over from RoPE), the PE's
        own setting so a study or sweep row `{name: drope}` is complete; None: never."""
        return None

    def after_switch(self) -> bool | None:
        """Whether this config describes the PE after its switch (DroPE's `pe.dropped`), which meta.json's
        `pe_dropped_at_tokens` must agree with; None: the PE has no switch."""
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
    # a difference of positions is the distance of the tokens (positions are token indices plus one offset per row
    # or document); False inside a wrapper that sets the positions itself (pe/wrapper.py `sets_positions`:
    # randomized draws, coupled ids), where a kernel applying a bias by token distance (flash_alibi) would be wrong
    token_distances: bool = True

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class PositionalEncoding(nn.Module):
    name: ClassVar[str] = ""
    # "absolute" (added to embeddings), "rotary", "bias" (logit bias), "context" (CoPE) or "none". Used for reports and
    # the shift-invariance contract test, never for control flow: what model code asks is derived from the hooks.
    kind: ClassVar[str] = "none"
    summary: ClassVar[str] = ""
    Config: ClassVar[type[PEConfig]] = PEConfig
    # the second layer of the contract, speed and accounting (pe/speed.py): optional, derived from the meaning
    Speed: ClassVar[type[PESpeed]] = PESpeed

    def __init__(self, cfg: PEConfig, ctx: PEContext):
        super().__init__()
        self.check_model(cfg, ctx)
        self.cfg = cfg
        self.ctx = ctx
        self.speed = self.Speed(self)

    @classmethod
    def check_model(cls, cfg: PEConfig, ctx: PEContext) -> None:
        """Checks that need the model's dimensions; called by config.resolve() before any work."""

    # None: defined at any length.
    @property
    def max_positions(self) -> int | None:
        return None

    @property
    def is_relative(self) -> bool:
        """Whether the attention scores depend on positions only through their differences; by default whether the
        PE leaves the embeddings alone (an absolute PE adds its table there). Held to the scores by the contract
        test's shift invariance."""
        return not overrides(type(self), "embed")

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

    def score_mod(self, layer: int, pos_q_T: torch.Tensor, pos_k_S: torch.Tensor,
                  feats_BHS: torch.Tensor | None = None) -> ScoreMod | None:
        """The logit bias of layer `layer` as a FlexAttention score_mod fn(score, b, h, q_idx, kv_idx) -> score
        (the eager kernel evaluates it on broadcast index grids: one definition serves every kernel); None: no
        bias. `feats_BHS`: `token_features` of every key, cached ones included (None for a PE without them)."""
        return None

    def token_positions(self, layer: int, x_BTD: torch.Tensor) -> torch.Tensor | None:
        """(B, H, T) float32 positions per head and token read from layer `layer`'s attention input (RePo), which
        attention hands `rotate` in place of the window's positions; None: the layer rotates at `pos_T`. A token's
        position may read only its own input, so the keys kept in the KV cache stay those a full forward makes."""
        return None

    def token_features(self, layer: int, x_BTD: torch.Tensor) -> torch.Tensor | None:
        """(B, H, T) float32 per head and token read from layer `layer`'s attention input (FoX's log forget gates),
        or (B, H, F, T) with F channels per token (PaTH's w and beta), kept in the KV cache beside the keys (joined
        along the last axis) and handed to `score_mod` or `logits_mod` as `feats_BHS`; None: the bias reads no
        token."""
        return None

    def logits_mod(self, layer: int, q_BHTK: torch.Tensor, s_BHTS: torch.Tensor, k_BHSK: torch.Tensor | None = None,
                   feats_BHS: torch.Tensor | None = None) -> torch.Tensor:
        """Rewrite the whole (B, H, T, S) scaled logit matrix, future and masked keys already -inf, for a bias at
        (i, j) that reads other entries of the row (CoPE's positions sum gates over the keys): no elementwise
        score_mod can express it, so only the eager kernel runs such a PE (derived: `has_logits_mod`). `k_BHSK`: the
        keys scored (cached ones included), `feats_BHS`: their `token_features`, for a PE that transforms the keys
        per query (PaTH); None where a caller has none."""
        return s_BHTS

    @property
    def has_score_mod(self) -> bool:
        """Whether this PE adds a logit bias: derived from the class overriding `score_mod` or `logits_mod`, never
        declared, so a new bias PE cannot forget it and silently run on a kernel that ignores biases. Known at
        construction, so attention picks its kernel once."""
        return overrides(type(self), "score_mod", "logits_mod")

    @property
    def has_logits_mod(self) -> bool:
        """Whether the bias needs the whole logit matrix (`logits_mod`): only the eager kernel can run it."""
        return overrides(type(self), "logits_mod")

    @property
    def has_token_features(self) -> bool:
        """Whether the bias depends on the tokens (`token_features`): it differs per batch row."""
        return overrides(type(self), "token_features")

    @property
    def position_free(self) -> bool:
        """Whether this PE puts no position anywhere (NoPE, a hybrid's NoPE layers): derived from the class
        overriding none of the hooks that carry positions into the embeddings or the scores. What model code asks of
        a layer's PE (model.qk_norm_layers=positional, a temperature on NoPE layers only), never its `kind`."""
        return not overrides(type(self), *CARRIES_POSITIONS)

    def layer_pe(self, layer: int) -> PositionalEncoding:
        return self

    def layer_window(self, layer: int) -> int | None:
        """The sliding window this PE gives layer `layer`'s attention (None: full); read once at construction."""
        return None

    def drop(self) -> PEConfig:
        """Switch the PE at its point of the budget (`drop_share`; training/end_of_step.py): DroPE removes the
        positions, RePo's networks take over from RoPE. Returns the config that rebuilds the PE as it is now, which
        the checkpoint saves."""
        raise TypeError(f"PE `{self.name}` cannot drop its positions")

    @classmethod
    def can_drop(cls) -> bool:
        """Derived from the class overriding `drop`, as `has_score_mod` is: checked before training starts."""
        return cls.drop is not PositionalEncoding.drop

    def start_state(self, pos_T: torch.Tensor) -> torch.Tensor | None:
        """A per-token position state the layers carry and update from content (TAPE, arXiv 2501.00712: positions
        as tensors attention and the MLP rewrite layer by layer), made from the positions once per forward; None:
        the PE carries nothing, and the `carry_*` hooks get None and change nothing."""
        return None

    def carry_in(self, layer: int, q_BHTK, k_BHTK, v_BHTK, state):
        """(q, k, v) of layer `layer` given the carried state (after `rotate`, before the KV cache keeps k and v):
        TAPE rotates q and k by each token's state and appends the state to v, so the kernel's attention weights
        also mix the states and the cache keeps every key's. Identity by default."""
        return q_BHTK, k_BHTK, v_BHTK

    def carry_out(self, layer: int, out_BHTV, state):
        """(out_BHTK, state): the kernel's output split into the values' share and the state's update after
        attention (TAPE's eq. for the attention layer). Identity by default."""
        return out_BHTV, state

    def carry_mlp(self, layer: int, mlp_BTD, state):
        """The state after layer `layer`'s MLP, from the MLP's output `mlp_BTD` (TAPE's MLP layer). Identity."""
        return state

    def carry_bytes(self, layer: int, N: int) -> int:
        """Bytes the carried state and its updates hold at once for N tokens in layer `layer` (model/memory.py)."""
        return 0

    def aux_loss(self, pos_T: torch.Tensor) -> torch.Tensor | None:
        """An objective of the PE's own that training adds to the language-model loss (0-d, already weighted by
        the PE's config: SeqPE's contrastive and distillation losses, arXiv 2506.13277); called once
        per training forward with the batch's positions. None: the PE has none."""
        return None

    def extra_repr(self) -> str:
        return f"name={self.name}"


def check_member_switch(member: PEConfig, where: str) -> None:
    """A PE inside another (a wrapper's inner PE, a hybrid's member) cannot switch at a point of the budget: the
    loop switches the model's PE (`drop`), which a wrapper or hybrid does not relay, so the run would train the
    first stage to its end under the member's name. ConfigError before any work."""
    require(member.drop_share() is None,
            f"{where} = `{member.name}` switches at a point of the budget ({member.switch_setting}), which only the "
            f"model's own PE can: make it the model's PE (pe.name={member.name}), or use a member that does not "
            "switch")


def overrides(cls, *hooks: str) -> bool:
    """Whether a PE class overrides any of these hooks of the base contract."""
    return any(getattr(cls, hook) is not getattr(PositionalEncoding, hook) for hook in hooks)


def reads_tokens(cls) -> bool:
    """Whether a PE class is data-dependent (reads the layer input or the whole logit matrix): such a PE is defined
    for causal self-attention only (model/attention.py), not for the encoder-decoder's bidirectional encoder."""
    return overrides(cls, "token_features", "logits_mod", "token_positions", "start_state")


def decoder_only(cls) -> bool:
    """Whether a PE class needs the decoder-only Transformer: it carries a state through the layers (TAPE) or adds
    its own objective (SeqPE), which only model/transformer.py threads and returns."""
    return overrides(cls, "start_state", "aux_loss")


def attention_bias(pe: PositionalEncoding, layer: int, pos_q_T: torch.Tensor, pos_k_S: torch.Tensor,
                   feats_BHS: torch.Tensor | None, k_BHSK: torch.Tensor | None = None) -> ScoreMod | LogitsMod | None:
    """What attention hands its kernel for layer `layer` of `pe` (the layer's PE): the `logits_mod` bound to the
    layer, the keys `k_BHSK` (cached ones included) and their token features, where the PE has one (only the eager
    kernel accepts it), else its `score_mod`."""
    if pe.has_logits_mod:
        return LogitsMod(lambda q_BHTK, s_BHTS: pe.logits_mod(layer, q_BHTK, s_BHTS, k_BHSK, feats_BHS))
    return pe.score_mod(layer, pos_q_T, pos_k_S, feats_BHS)


@dataclass(frozen=True)
class Hook:
    """One row of the contract: a PositionalEncoding member a PE author may override.

    `called_on`: the object the model calls it on: "model" (the model's PE, `model.pe`), "layer" (`layer_pe(layer)`,
    the PE of the layer at hand), "module" (every PositionalEncoding module of the model, nested ones included) or
    "class" (the registered class, before any instance exists). A wrapper (pe/wrapper.py) relays the "model" hooks
    to its inner PE by construction (all but those deciding a derived property: `NOT_RELAYED`); "layer" hooks reach
    the inner PE through the relayed `layer_pe`, "module" hooks through the inner PE being a submodule."""

    signature: str
    called_on: str
    default: str

    @property
    def name(self) -> str:
        return self.signature.split("(")[0]


HOOKS: tuple[Hook, ...] = (
    Hook("check_model(cfg, ctx)", "class", "-"),
    Hook("max_positions", "model", "None"),
    Hook("is_relative", "model", "true without embed"),
    Hook("positions(T, device, offset)", "model", "offset .. offset+T-1"),
    Hook("document_positions(within_BT, doc_BT)", "model", "index in its document"),
    Hook("data_positions(data_BT, default)", "model", "default(): ids ignored"),
    Hook("embed(x_BTD, pos_T)", "model", "identity"),
    Hook("layer_pe(layer)", "model", "self"),
    Hook("layer_window(layer)", "model", "None: full attention"),
    Hook("drop()", "model", "raises: cannot drop"),
    Hook("decay_params()", "module", "[]: no decay"),
    Hook("rotate(q_BHTK, k_BHTK, pos_T)", "layer", "identity"),
    Hook("score_mod(layer, pos_q_T, pos_k_S, feats_BHS=None)", "layer", "None: no bias"),
    Hook("token_positions(layer, x_BTD)", "layer", "None: pos_T"),
    Hook("token_features(layer, x_BTD)", "layer", "None"),
    Hook("logits_mod(layer, q_BHTK, s_BHTS, k_BHSK, feats_BHS)", "layer", "identity, never called"),
    Hook("start_state(pos_T)", "model", "None: no state"),
    Hook("carry_in(layer, q_BHTK, k_BHTK, v_BHTK, state)", "layer", "identity"),
    Hook("carry_out(layer, out_BHTV, state)", "layer", "identity"),
    Hook("carry_mlp(layer, mlp_BTD, state)", "layer", "identity"),
    Hook("carry_bytes(layer, N)", "layer", "0"),
    Hook("aux_loss(pos_T)", "model", "None: no objective"),
)

# Members of PositionalEncoding that are not hooks: derived from the hooks or helpers of the model's, never overridden
DERIVED = ("check_positions", "reads_data_positions", "can_drop", "has_score_mod", "has_logits_mod",
           "has_token_features", "position_free")

CALLED_ON = {"model": "model.pe", "layer": "layer_pe(layer)", "module": "each PE module", "class": "class"}


def contract_table(overriders: dict[str, list[str]], markdown: bool = True) -> str:
    """The contract in its two layers, one row per member: the meaning (`HOOKS`, overridden by PE classes), then
    speed and accounting (pe/speed.py `SPEED`, overridden by `Speed` providers; the default derived from the
    meaning). As Markdown tables (docs/architecture.md), or as this module's docstring has them (`markdown=False`:
    the classes that override a member wrapped under it, within 116 columns). `overriders`: member name -> the
    classes that override it (tests/pe/test_pe_hooks.py passes the classes found in pe/ and checks both texts)."""
    who = lambda name: ", ".join(overriders.get(name, [])) or "-"  # noqa: E731
    if markdown:
        rows = ["| meaning hook | called on | default | overridden in |", "|---|---|---|---|"]
        rows += [f"| `{h.signature}` | {CALLED_ON[h.called_on]} | {h.default} | {who(h.name)} |" for h in HOOKS]
        rows += ["", "| speed and accounting (`pe.speed`) | derived default | provided by |", "|---|---|---|"]
        rows += [f"| `{m.signature}` | {m.default} | {who(m.name)} |" for m in SPEED]
        return "\n".join(rows)
    rows = [f"  {'meaning hook':<52}{'called on':<17}default", f"  {'':<6}overridden in"]
    for hook in HOOKS:
        rows.append(f"  {hook.signature:<52}{CALLED_ON[hook.called_on]:<17}{hook.default}")
        rows += textwrap.wrap(who(hook.name), 116, initial_indent=" " * 8, subsequent_indent=" " * 8)
    rows += ["", f"  {'speed and accounting (pe.speed)':<52}derived default", f"  {'':<6}provided by"]
    for member in SPEED:
        rows.append(f"  {member.signature:<52}{member.default}")
        rows += textwrap.wrap(who(member.name), 116, initial_indent=" " * 8, subsequent_indent=" " * 8)
    return "\n".join(rows)


def _check(name: str, cls) -> None:
    if not issubclass(cls.Config, PEConfig):
        raise TypeError(f"{cls.__name__}.Config must subclass PEConfig")
    if not cls.summary:
        raise TypeError(f"{cls.__name__} needs a one-line `summary`")
    if not issubclass(cls.Speed, PESpeed):
        raise TypeError(f"{cls.__name__}.Speed must subclass PESpeed (pe/speed.py)")
    for klass in cls.__mro__[:cls.__mro__.index(PositionalEncoding)]:
        misplaced = [m.name for m in SPEED if m.name in klass.__dict__]
        if misplaced:  # it would never be called: model code asks `pe.speed`
            raise TypeError(f"{klass.__name__} defines {', '.join(misplaced)} on the PE; speed and accounting belong "
                            "to its `Speed` provider (a PESpeed subclass, pe/speed.py; docs/adding-a-pe.md)")


# Name -> PositionalEncoding class. Variants register with `@PES.register("name")` in their own file;
# pe/__init__.py imports every variant file explicitly, so `grep PES.register` finds them all.
PES = Registry("positional encoding", _check, where="pe.name",
               hint=". List them with `posbench train --list-pe-types`.")
