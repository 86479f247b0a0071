"""Which code path attention takes, as data: the kernel `model.attention=auto` gives a layer (once, at
construction) and, inside the sdpa_bias kernel, the path of each call. Each path is one rule with one line saying
when it applies; the first rule that applies is the plan, and the kernels execute it (model/kernels.py,
model/sdpa_bias_kernel.py) without dispatch conditions of their own.

Shape legend: H heads, T query length, S key length (S >= T with a KV cache).

The rules read a PE's capabilities (derived from its hooks: has_score_mod, has_logits_mod, has_token_features,
and the fields of its `fast_bias`, pe/fast_bias.py), grad mode and training dropout, packing (documents), the
layer's window, the device and the call's lengths. Two thresholds, one per path they gate:
`bias_attention.BLOCK_ELEMENTS` (a call whose whole bias is one block of that many floats runs SDPA once) and
`far_field.MIN_QUERIES` (fewer queries run the one-block or blocked path instead of the far field). Among the paths
chosen for speed alone (one block, far field, blocked) that apply, the one with the lowest price runs
(model/bias_cost.py: the score entries each hands SDPA, plus a price per call).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import torch

from posbench.model import bias_attention, bias_cost, far_field
from posbench.pe.encoding import LogitsMod, PositionalEncoding
from posbench.pe.fast_bias import FastBias


@dataclass(frozen=True)
class KernelRule:
    name: str
    when: str
    applies: Callable[[PositionalEncoding, str], bool]


def learned_bias(pe: PositionalEncoding) -> bool:
    """The PE's score_mod reads parameters that train (T5's buckets, KERPLE, FIRE's MLP, relative_learned) and no
    token features: compiled FlexAttention's backward adds every score's gradient into those few parameters by
    atomics (torch's flex_lib::zeros_and_scatter, lowered as an atomic_add scatter; docs/performance.md), and
    training collapses; a dense bias through SDPA has an ordinary gradient. ALiBi (fixed slopes) and FoX (a bias
    from token features, per row) stay on FlexAttention."""
    return pe.has_score_mod and not pe.has_token_features and any(p.requires_grad for p in pe.parameters())


# model.attention=auto: the first kernel whose rule applies (`auto_kernel_name`)
AUTO_KERNEL = (
    KernelRule("sdpa", "the PE adds no logit bias", lambda pe, device: not pe.has_score_mod),
    KernelRule("eager", "the bias rewrites whole rows (logits_mod, CoPE): only eager applies it",
               lambda pe, device: pe.has_logits_mod),
    KernelRule("sdpa_dense", "a learned bias on CUDA: SDPA with the layer's bias as a float mask and its gradient "
               "(FlexAttention's backward serialises on the parameters' atomics, `learned_bias`)",
               lambda pe, device: device == "cuda" and learned_bias(pe)),
    KernelRule("flex", "a bias on CUDA: compiled FlexAttention", lambda pe, device: device == "cuda"),
    KernelRule("sdpa_bias", "a bias elsewhere (CPU): eager under autograd, blocked SDPA without (BIAS_PATHS)",
               lambda pe, device: True),
)


def auto_kernel_name(pe: PositionalEncoding, device_type: str) -> str:
    """The kernel `model.attention=auto` gives a layer whose PE is `pe` on `device_type`."""
    return next(rule.name for rule in AUTO_KERNEL if rule.applies(pe, device_type))


@dataclass(frozen=True)
class BiasCall:
    """What the sdpa_bias plan reads of one call. `bias`: "none", "logits" (a LogitsMod) or "score" (a score_mod);
    `table_rows()`: the leading queries the PE's distance table serves in this call (0: no table), asked only by
    the rules that need it (making the table costs a pass over the keys); `far_field`, `rows_bias`: the PE's
    FastBias has them."""

    bias: str
    grad: bool
    dropout: bool
    documents: bool
    per_row: bool
    window: bool
    device: str
    H: int
    T: int
    S: int
    table_rows: Callable[[], int]
    far_field: bool = False
    rows_bias: bool = False
    sinks: bool = False  # model.attention_sinks: the eager kernel's softmax carries them
    chunk: bool = False  # model.attention_chunk: the eager kernel's allowed mask carries it
    dense_grad: bool = False  # the kernel trains through SDPA's gradient of a dense bias (sdpa_dense)
    far_start: Callable[[], int] = lambda: 0  # the far field's FarField.start, asked only to price that path

    @property
    def one_block(self) -> bool:
        """The whole causal (H, T, S) bias is one block (decoding steps, short prompts)."""
        return not self.window and self.H * self.T * self.S <= bias_attention.BLOCK_ELEMENTS

    def table_serves_all(self) -> bool:
        return self.table_rows() >= self.T

    def rows_serve_rest(self) -> bool:
        return self.rows_bias and self.table_rows() < self.T


class BiasPath(enum.Enum):
    DENSE = "dense"
    EAGER = "eager"
    DOCUMENTS = "documents"
    PER_ROW = "per_row"
    ONE_BLOCK_TABLE = "one_block_table"
    FAR_FIELD = "far_field"
    ONE_BLOCK_ROWS = "one_block_rows"
    BLOCKED_TABLE = "blocked_table"
    BLOCKED_ROWS = "blocked_rows"
    BLOCKED = "blocked"


@dataclass(frozen=True)
class BiasRule:
    path: BiasPath
    when: str
    applies: Callable[[BiasCall], bool]
    # a path chosen for speed alone: its price (model/bias_cost.py); None: a path the call's contents require
    cost: Callable[[BiasCall], float] | None = None


def _one_block_cost(c: BiasCall) -> float:
    return bias_cost.one_block(c.H, c.T, c.S)


def _blocked_cost(c: BiasCall) -> float:
    return bias_cost.blocked(c.H, c.T, c.S)


# the sdpa_bias kernel's paths, in order: the first that applies runs, or where it is priced the cheapest priced
# one that applies (`plan_bias_call`)
BIAS_PATHS = (
    BiasRule(BiasPath.DENSE, "autograd on, a score_mod, no sinks, on the kernel that trains through SDPA's bias "
             "gradient (sdpa_dense): the layer's whole bias, with its graph, as SDPA's float mask",
             lambda c: c.dense_grad and c.bias == "score" and c.grad and not c.sinks),
    BiasRule(BiasPath.EAGER, "autograd on, attention dropout in training, no bias or a logits_mod, attention "
             "sinks or chunks: the eager reference",
             lambda c: c.bias != "score" or c.grad or c.dropout or c.sinks or c.chunk),
    BiasRule(BiasPath.DOCUMENTS, "documents reach the kernel: blocked SDPA, the score_mod per block and row, the "
             "documents' mask", lambda c: c.documents),
    BiasRule(BiasPath.PER_ROW, "a bias read from token features (FoX): blocked SDPA, the score_mod per block and "
             "row", lambda c: c.per_row),
    BiasRule(BiasPath.ONE_BLOCK_TABLE, "the distance table serves every query and the call is one block: SDPA once "
             "on its grid", lambda c: c.one_block and c.table_serves_all(), _one_block_cost),
    BiasRule(BiasPath.FAR_FIELD, "the table serves every query, the PE has a far field, CPU, no window, T >= "
             "far_field.MIN_QUERIES: model/far_field.py",
             lambda c: c.far_field and not c.window and c.device == "cpu" and c.T >= far_field.MIN_QUERIES
             and c.table_serves_all(), lambda c: bias_cost.far(c.H, c.T, c.S, c.far_start())),
    BiasRule(BiasPath.ONE_BLOCK_ROWS, "the PE's rows_bias serves the queries the table does not and the call is one "
             "block: SDPA once", lambda c: c.one_block and c.rows_serve_rest(), _one_block_cost),
    BiasRule(BiasPath.BLOCKED_TABLE, "the table serves every query: blocked SDPA, each block gathered from it",
             lambda c: c.table_serves_all(), _blocked_cost),
    BiasRule(BiasPath.BLOCKED_ROWS, "rows_bias serves the queries the table does not (joined with the table's "
             "rows): blocked SDPA", lambda c: c.rows_serve_rest(), _blocked_cost),
    BiasRule(BiasPath.BLOCKED, "otherwise: blocked SDPA, the score_mod evaluated per block", lambda c: True,
             _blocked_cost),
)


def plan_bias_call(call: BiasCall) -> BiasPath:
    """The path one sdpa_bias call takes: the first of BIAS_PATHS that applies when the call's contents require it
    (no `cost`); else, of the priced paths that apply, the cheapest, the earlier on a tie (bias_cost.py)."""
    first = next(i for i, rule in enumerate(BIAS_PATHS) if rule.applies(call))
    if BIAS_PATHS[first].cost is None:  # asked no further: a required path never makes the distance table
        return BIAS_PATHS[first].path
    priced = [rule for rule in BIAS_PATHS[first:] if rule.cost is not None and rule.applies(call)]
    return min(priced, key=lambda rule: rule.cost(call)).path  # min keeps the earliest of equal prices


def bias_kind(score_mod) -> str:
    """BiasCall.bias of what attention hands a kernel: None, a LogitsMod, or a score_mod."""
    return "none" if score_mod is None else "logits" if isinstance(score_mod, LogitsMod) else "score"


_PROBE = torch.zeros(1)


def static_fast_bias(pe: PositionalEncoding) -> FastBias | None:
    """Layer 0's FastBias of a one-token call: the fields that do not depend on the call (which fast forms the PE
    has, ALiBi's slopes), for choices made at construction (`supports`, `forward_bytes`)."""
    return pe.speed.fast_bias(0, _PROBE, _PROBE)
