"""The PE contract of posbench's remote code (torch only, never posbench): the same hooks, by the same names, as
posbench's `PositionalEncoding` (posbench/pe/encoding.py), with a row per sequence, plus the registry of the
classes that implement them, by the name in `config.pe`.

Shape legend: B batch, H heads, T new tokens, S cached + new tokens, K head dim, D model dim.
A leading B of a position tensor may be 1 (every row at the same positions: an unpadded batch).

Hooks, all identities by default, as posbench's:
  positions(index_BS)                -> pos_BS  float32 positions of token indices (posbench's positions /
                                                document_positions, per row: transformers left-pads batches)
  embed(x_BTD, pos_BT)               -> x_BTD   absolute tables
  rotate(q_BHTK, k_BHTK, pos_BT)     -> q, k    the RoPE family
  score_mod(layer, pos_q_BT, pos_k_BS, feats_BHS=None) -> fn(score, b, h, q_idx, kv_idx) | None  the logit bias
      in FlexAttention's signature, evaluated on broadcast index grids (`score_grids`) as posbench's eager kernel
      does; a data-dependent bias (FoX) reads feats_BHS, the token features of every key
  token_features(layer, x_BTD)       -> feats_BHT | None  (FoX's log forget gates; cached beside the keys)
  logits_mod(layer, q_BHTK, s_BHTS, k_BHSK=None, feats_BHS=None) -> s_BHTS  on the masked logit matrix (CoPE;
      PaTH transforms the keys k_BHSK per query, from its token features)
  layer_pe(layer), layer_window(layer), max_positions, check_positions(n)
As in posbench, the decoder asks the model's PE for positions, embed, layer_pe and layer_window, and `layer_pe(layer)`
for everything between q, k and the softmax (rotate, token_features, score_mod, logits_mod). posbench's speed-only
forms (fast_bias) and its training hooks (drop, decay_params, layer_flops, data_positions) have no use here.
Remote-only: `options` (the config fields a class implements; any other is refused, so an option this code does
not implement never loads as a silently different model), `check_config` (nested configs), `whole_sequence`
(positions drawn per whole sequence: no cache) and `pads_ok` (rows may sit at different positions).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

PE_CLASSES: dict[str, type[PositionalEncoding]] = {}


def register(*names: str):
    """Class decorator: the class implements the posbench PEs `names` (the names written in config.pe)."""
    def wrap(cls):
        for name in names:
            PE_CLASSES[name] = cls
        return cls
    return wrap


@dataclass(frozen=True)
class PEContext:
    """The model dimensions a PE needs, as posbench's PEContext."""

    d_model: int
    n_heads: int
    n_layers: int
    seq_len: int  # training length (a randomized PE's inner PE gets its whole range here)
    init_std: float

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def check_pe_config(cfg: dict, where: str = "pe") -> None:
    """ValueError unless the PE named in cfg (and every PE or RoPE scaling nested in it), and every option it sets,
    is implemented here."""
    name = cfg.get("name")
    if name not in PE_CLASSES:
        raise ValueError(f"{where}: positional encoding `{name}` has no class in posbench's remote code")
    PE_CLASSES[name].check_config(cfg, where)


def build_pe(cfg: dict, ctx: PEContext) -> PositionalEncoding:
    return PE_CLASSES[cfg["name"]](cfg, ctx)


def score_grids(B: int, H: int, T: int, S: int, device) -> tuple[torch.Tensor, ...]:
    """FlexAttention's (b, h, q_idx, kv_idx) as broadcast grids (B,1,1,1), (1,H,1,1), (1,1,T,1), (1,1,1,S)."""
    return (torch.arange(B, device=device)[:, None, None, None], torch.arange(H, device=device)[None, :, None, None],
            torch.arange(T, device=device)[None, None, :, None], torch.arange(S, device=device)[None, None, None, :])


class PositionalEncoding(nn.Module):
    options: frozenset = frozenset()  # config fields besides `name` this class implements
    nested: dict = {}  # option -> the function checking the config it holds (check_pe_config, check_scaling)
    whole_sequence = False  # positions depend on the whole sequence: no KV cache

    def __init__(self, cfg: dict, ctx: PEContext):
        super().__init__()
        self.cfg, self.ctx = cfg, ctx

    @classmethod
    def check_config(cls, cfg: dict, where: str) -> None:
        """ValueError for a config field this class does not implement; the options in `nested` hold configs of
        their own, checked by the function named there (a list of them: the class overrides)."""
        unknown = set(cfg) - {"name"} - cls.options
        if unknown:
            raise ValueError(f"{where}: option(s) {sorted(unknown)} of `{cfg['name']}` are not implemented by "
                             "posbench's remote code; loading would compute a different model")
        for key, check in cls.nested.items():
            if key in cfg:
                check(cfg[key], f"{where}.{key}")

    @property
    def name(self) -> str:
        return self.cfg["name"]

    @property
    def pads_ok(self) -> bool:
        """Whether rows may sit at different positions (a left-padded batch): every PE whose output at a
        position depends only on that row's positions."""
        return True

    @property
    def max_positions(self) -> int | None:
        return None

    def check_positions(self, n_positions: int) -> None:
        limit = self.max_positions
        if limit is not None and n_positions > limit:
            raise ValueError(f"PE `{self.name}` is defined for positions 0..{limit - 1}, but {n_positions} "
                             f"positions were requested; give at most {limit} tokens")

    def positions(self, index_BS: torch.Tensor) -> torch.Tensor:
        """Token indices (long) -> this PE's float32 positions."""
        self.check_positions(int(index_BS.max().item()) + 1 if index_BS.numel() else 0)
        return index_BS.float()

    def embed(self, x_BTD, pos_BT):
        return x_BTD

    def rotate(self, q_BHTK, k_BHTK, pos_BT):
        return q_BHTK, k_BHTK

    def score_mod(self, layer: int, pos_q_BT, pos_k_BS, feats_BHS=None):
        return None

    def token_features(self, layer: int, x_BTD):
        return None

    def logits_mod(self, layer: int, q_BHTK, s_BHTS, k_BHSK=None, feats_BHS=None):
        return s_BHTS

    def layer_pe(self, layer: int) -> PositionalEncoding:
        return self

    def layer_window(self, layer: int) -> int | None:
        return None


register("none")(PositionalEncoding)
