"""DoPE, Denoising Rotary Position Embedding (Xiong et al., arXiv 2511.09146), as an evaluation-time option of every
rotary PE, like `--rope-scaling` (evaluation/scaling.py). No authors' code is published: this is posbench's reading
of the equations (docs/pe_defaults.md "DoPE"), each choice the paper leaves open an option of `DopeConfig` or a
decision written there.

    calibrate  n_calibration sequences at the evaluated length, one no-grad forward: per layer l and head h the
               uncentred Gram G = sum over sequences and tokens of k k^T (K x K, float64) of the keys (or queries)
               after the model's own rotation (or before it)
    score      v1 eq. 30: lambda = eigenvalues of G / tr G, descending, the top r = min(truncate, K);
               p_i = lambda_i / sum_{j<=r} lambda_j; score = exp(-sum p_i log p_i), 0 log 0 = 0
    select     the n_heads lowest scores (ascending; descending: the highest) over every layer x head at once,
               ties broken by layer, then head
    apply      the mode's change of the chosen heads after the rotation (evaluation/dope_modes.py), through each
               attention's head edit (model/head_edit.py); every other head as it was

The choice depends on the calibration rows only, so the scored forward stays causal and its KV cache equals no cache.
Shape legend: N calibration rows, B batch, L layers, H heads, T tokens, K head dim.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from posbench.errors import ConfigError, DataError
from posbench.evaluation.dope_config import DopeConfig
from posbench.evaluation.dope_modes import DOPE_MODES
from posbench.evaluation.scaling import rotary_modules
from posbench.model.attention import Attention
from posbench.model.head_edit import HeadEdit

# the vectors a Gram is collected from: (stage, indicator) -> a pick of (q_in, k_in, q_rotated, k_rotated)
PICKS: dict[tuple[str, str], Callable] = {
    ("post_rope", "keys"): lambda q_in, k_in, q, k: k,
    ("post_rope", "queries"): lambda q_in, k_in, q, k: q,
    ("pre_rope", "keys"): lambda q_in, k_in, q, k: k_in,
    ("pre_rope", "queries"): lambda q_in, k_in, q, k: q_in,
}
# the sort key of a head's (score, layer, head) per order: ties go to the lower layer, then the lower head
ORDERS: dict[str, Callable[[tuple[float, int, int]], tuple]] = {
    "ascending": lambda s: (s[0], s[1], s[2]),
    "descending": lambda s: (-s[0], s[1], s[2]),
}


def attention_layers(model: nn.Module) -> dict[int, Attention]:
    """The model's attention modules by layer index (a decoder has one per layer)."""
    found: dict[int, Attention] = {}
    for m in model.modules():
        if isinstance(m, Attention):
            if m.layer in found:
                raise ConfigError("dope: this model has two attention modules at layer "
                                  f"{m.layer} (an encoder-decoder?); DoPE scores the heads of a decoder-only model")
            found[m.layer] = m
    return found


def check_dope(model: nn.Module, cfg: DopeConfig | None, where: str) -> None:
    """Everything DoPE refuses, before any work: no rotary PE, more heads asked than the model has, a mode that
    cannot change this model's heads. `model` may be on the meta device."""
    if cfg is None:
        return
    if not rotary_modules(model):
        pe = getattr(model, "pe", None)
        raise ConfigError(f"{where}: --dope denoises rotary position embeddings and this model's PE is "
                          f"`{getattr(pe, 'name', '?')}` (no rotary module: rope, lrope, prope, xpos, modded_rope, "
                          "hope, fope, or a hybrid/randomized wrapper around one); drop --dope for it")
    layers = attention_layers(model)
    total = sum(a.n_heads for a in layers.values())
    if cfg.n_heads > total:
        raise ConfigError(f"{where}: dope.n_heads={cfg.n_heads} but the model has {len(layers)} layers x "
                          f"{total // max(1, len(layers))} heads = {total}; ask for at most {total}")
    DOPE_MODES.build(cfg.mode).check_model(model, where)


class GramCollector(HeadEdit):
    """Sums k k^T per head (float64) of the picked vectors; q and k pass unchanged."""

    def __init__(self, pick: Callable):
        self.pick = pick
        self.grams: dict[int, torch.Tensor] = {}

    def __call__(self, layer, q_in_BHTK, k_in_BHTK, q_BHTK, k_BHTK, pos_T):
        x = self.pick(q_in_BHTK, k_in_BHTK, q_BHTK, k_BHTK).double()
        g_HKK = torch.einsum("bhtk,bhtj->hkj", x, x)
        self.grams[layer] = g_HKK if layer not in self.grams else self.grams[layer] + g_HKK
        return q_BHTK, k_BHTK


@contextlib.contextmanager
def edited(model: nn.Module, edit_for: Callable[[int], HeadEdit]) -> Iterator[None]:
    """Every attention layer holds `edit_for(layer)` inside the block and what it held before after it (KEEP unless
    an option is applied), also on an error."""
    layers = attention_layers(model)
    before = {layer: attn.head_edit for layer, attn in layers.items()}
    try:
        for layer, attn in layers.items():
            attn.head_edit = edit_for(layer)
        yield
    finally:
        for layer, attn in layers.items():
            attn.head_edit = before[layer]


def same_length_batches(rows: torch.Tensor | list[torch.Tensor], batch_size: int) -> list[torch.Tensor]:
    """Rows (N, T), or a list of 1-D rows of any lengths (a task split's examples), as batches of equal lengths:
    no padding token enters a Gram."""
    by_length: dict[int, list[torch.Tensor]] = {}
    for row in rows:
        by_length.setdefault(int(row.shape[0]), []).append(torch.as_tensor(row, dtype=torch.long))
    return [torch.stack(same[a:a + batch_size]) for same in by_length.values()
            for a in range(0, len(same), batch_size)]


@torch.no_grad()
def calibration_grams(model: nn.Module, rows: torch.Tensor | list[torch.Tensor], cfg: DopeConfig, batch_size: int,
                      autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
                      ) -> torch.Tensor:
    """(L, H, K, K) float64: each head's uncentred Gram over every calibration row and token."""
    collector = GramCollector(PICKS[(cfg.stage, cfg.indicator)])
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with edited(model, lambda layer: collector):
            for batch_BT in same_length_batches(rows, batch_size):
                with autocast():
                    model.hidden(batch_BT.to(device))
    finally:
        model.train(was_training)
    return torch.stack([collector.grams[layer] for layer in sorted(collector.grams)])


def truncated_entropy_score(g_KK: torch.Tensor, truncate: int) -> torch.Tensor:
    """v1 eq. 30 over the last two dims: exp(-sum_{i<=r} p_i log p_i), p_i = lambda_i / sum_{j<=r} lambda_j, lambda
    the eigenvalues of G / tr G in descending order, r = min(truncate, K). float64; 1 at r = 1 for every G."""
    g = g_KK.double()
    trace = torch.diagonal(g, dim1=-2, dim2=-1).sum(-1)
    if bool((trace <= 0).any()):
        raise DataError("dope: a head's calibration vectors are all zero (trace of its Gram 0), so its truncated "
                        "entropy is undefined; calibrate on other rows (dope.calibration_seed) or another stage")
    lam = torch.linalg.eigvalsh(g / trace[..., None, None]).flip(-1).clamp_min(0.0)  # descending, rounding's < 0 cut
    top = lam[..., :min(truncate, g.shape[-1])]
    p = top / top.sum(-1, keepdim=True)
    plogp = torch.where(p > 0, p * torch.log(torch.where(p > 0, p, torch.ones_like(p))), torch.zeros_like(p))
    return torch.exp(-plogp.sum(-1))


def select_heads(scores_LH: torch.Tensor, n_heads: int, order: str) -> list[tuple[int, int]]:
    """The n_heads (layer, head) pairs first in `order` over every layer x head at once, ties by layer, then head."""
    flat = [(float(scores_LH[l_, h]), l_, h) for l_ in range(scores_LH.shape[0]) for h in range(scores_LH.shape[1])]
    return [(l_, h) for _, l_, h in sorted(flat, key=ORDERS[order])[:n_heads]]


@dataclass
class DopeChoice:
    """The heads one calibration chose, with every head's score (results.json records both)."""

    length: int  # the longest calibration row
    heads: list[tuple[int, int]]
    scores_LH: list[list[float]]

    def chosen(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for layer, head in self.heads:
            out.setdefault(layer, []).append(head)
        return out

    def record(self) -> dict:
        return {"longest_row": self.length,
                "heads": [{"layer": l_, "head": h, "score": self.scores_LH[l_][h]} for l_, h in self.heads],
                "scores": self.scores_LH}


def choose(model: nn.Module, rows: torch.Tensor | list[torch.Tensor], cfg: DopeConfig, batch_size: int,
           autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> DopeChoice:
    """Calibrate on `rows` (sequences of the evaluated length: (N, T), or 1-D rows), score every head and choose."""
    scores_LH = truncated_entropy_score(calibration_grams(model, rows, cfg, batch_size, autocast), cfg.truncate)
    length = max(int(len(row)) for row in rows)
    return DopeChoice(length, select_heads(scores_LH, cfg.n_heads, cfg.order), scores_LH.tolist())


@contextlib.contextmanager
def denoised(model: nn.Module, choice: DopeChoice, cfg: DopeConfig, train_len: int) -> Iterator[None]:
    """The model with the chosen heads changed by the mode inside the block, as it was after it."""
    edit = DOPE_MODES.build(cfg.mode).edit(choice.chosen(), model, train_len)
    with edited(model, lambda layer: edit):
        yield


@dataclass
class Dope:
    """DoPE over an evaluation: `at(length, rows, where)` calibrates on the rows a suite draws for that length and
    applies the choice inside the block; `records` lists every choice made, for results.json."""

    cfg: DopeConfig
    train_len: int
    batch_size: int
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    records: list[dict] = field(default_factory=list)

    @contextlib.contextmanager
    def at(self, model: nn.Module, length: int, rows: Callable[[int, int, int], torch.Tensor | list[torch.Tensor]],
           where: str) -> Iterator[None]:
        """`rows(length, n, seed)`: n token rows of the evaluated data at `length` ((n, length), or 1-D rows as long
        as the scored ones, a task split's), drawn with `seed`."""
        rows_NT = rows(length, self.cfg.n_calibration, self.cfg.calibration_seed)
        if len(rows_NT) == 0:  # no calibration row fits this length: nothing is changed, and the record says so
            self.records.append({"suite": where, "length": length, "heads": [], "scores": None,
                                 "na": "no calibration row fits this length; evaluated without DoPE"})
            yield
            return
        choice = choose(model, rows_NT, self.cfg, self.batch_size, self.autocast)
        self.records.append({"suite": where, "length": length, **choice.record()})
        with denoised(model, choice, self.cfg, self.train_len):
            yield


class NoDope:
    """No DoPE: the model as it is at every length."""

    @property
    def records(self) -> list[dict]:
        return []

    @contextlib.contextmanager
    def at(self, model, length, rows, where) -> Iterator[None]:
        yield
