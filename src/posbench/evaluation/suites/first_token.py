"""Attention to the first token (the "attention sink", Xiao et al. 2024): per layer, the attention probability a
query gives the window's first token, averaged over heads, over the queries at positions 1..L-1 (position 0 can
only attend to itself) and over non-overlapping windows of L tokens of the perplexity text. Qiu et al. 2025 measure
gated attention's claim this way ("the gate removes the attention sink": first-token mass falls); a learned sink
(model.attention_sinks) shows as the share no key keeps, reported beside it.

Shape legend: B windows in a batch, H heads, L window length (queries and keys).

A length the PE cannot represent is an "n/a" row. An architecture without attention (Mamba) has no row values.
The probabilities are the eager reference's (model.attention_probs), so every PE and attention option is measured
as its kernels compute it, at the cost of (B, H, L, L) float32 per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from posbench.config_loader import Checked
from posbench.errors import ConfigError
from posbench.evaluation.evaluator import Evaluator, Session, Target
from posbench.evaluation.markdown import fmt, md_table, short_reason
from posbench.evaluation.ppl_data import PplDataConfig, ValidationShards
from posbench.evaluation.suite_registry import SUITES
from posbench.evaluation.suites.ppl import positions_note, text_stream
from posbench.pe import PositionRangeError


@dataclass(frozen=True)
class FirstTokenConfig(Checked):
    data: PplDataConfig = field(default_factory=ValidationShards.Config)
    max_windows: int = 16  # windows of L tokens per length, the stream's first ones

    def check(self) -> None:
        if self.max_windows < 1:
            raise ConfigError(f"first_token.max_windows must be >= 1, got {self.max_windows}")


def first_token_mass(probs: list[torch.Tensor]) -> tuple[list[float], list[float]]:
    """Per layer: (mean probability on key 0, mean share kept by no key) over batch, heads and queries 1..L-1."""
    mass, sink = [], []
    for p_BHLL in probs:
        rows = p_BHLL[:, :, 1:].double()
        mass.append(float(rows[..., 0].mean()))
        sink.append(float((1.0 - rows.sum(-1)).clamp_min(0.0).mean()))
    return mass, sink


@SUITES.register("first_token")
class FirstTokenAttention(Evaluator):
    title = "Attention to the first token (attention sinks)"
    options = FirstTokenConfig
    order = 20
    in_all = False  # an analysis asked for by name (the gated-attention and sink claims), not a score
    per_cell = "max_windows"

    def __init__(self, cfg: FirstTokenConfig, target: Target):
        super().__init__(cfg, target)
        need = max(target.lengths) * cfg.max_windows + 1
        self.data, self.stream, self.ids, self.positions_used = text_stream(cfg.data, target, need)

    def windows(self, L: int) -> list[int]:
        return [k * L for k in range(min(self.cfg.max_windows, (len(self.stream) - 1) // L))]

    def work(self) -> int:
        return sum(len(self.windows(L)) for L in self.target.lengths)

    @classmethod
    def forward_rows(cls, options: FirstTokenConfig, target: Target, L: int) -> int:
        return max(1, target.batch_size * target.train_len // L)

    @classmethod
    def held_bytes(cls, options: FirstTokenConfig, target: Target, L: int, attention_layers: int) -> int:
        """Every attention layer's float32 (B, H, L, L) probabilities, kept until the last layer's are made
        (model.attention_probs), and beside them two more: the layer being computed (its scores and softmax), or
        first_token_mass's float64 copy of one layer. Priced as one layer, 12 layers admitted a 12x too long context."""
        if not attention_layers:
            return 0
        one_layer = 4 * cls.forward_rows(options, target, L) * target.run_cfg.model.n_heads * L * L
        return (attention_layers + 2) * one_layer

    def measure(self, session: Session, L: int) -> dict:
        starts = self.windows(L)
        stream = torch.from_numpy(self.stream)
        ids = None if self.ids is None else torch.from_numpy(self.ids)
        step = self.forward_rows(self.cfg, self.target, L)
        mass_sum, sink_sum = None, None
        for a in range(0, len(starts), step):
            idx = torch.stack([torch.arange(s, s + L) for s in starts[a:a + step]])
            extra = {} if ids is None else {"data_pos_BT": ids[idx].to(session.device)}
            with session.autocast():
                probs = session.model.attention_probs(stream[idx].to(session.device), **extra)
            mass, sink = first_token_mass(probs)
            n = idx.shape[0]
            mass_sum = [n * m for m in mass] if mass_sum is None else [t + n * m for t, m in zip(mass_sum, mass)]
            sink_sum = [n * m for m in sink] if sink_sum is None else [t + n * m for t, m in zip(sink_sum, sink)]
            session.progress.update(n)
        layers = [m / len(starts) for m in mass_sum or []]
        sinks = [m / len(starts) for m in sink_sum or []]
        return {"layers": layers, "mean": float(np.mean(layers)) if layers else None, "sink": sinks,
                "windows": len(starts)}

    def run(self, session: Session) -> dict:
        rows = []
        for L in self.target.lengths:
            row = {"length": L, "na": None, "layers": [], "mean": None, "sink": [], "windows": 0}
            try:
                row.update(self.measure(session, L))
            except PositionRangeError as e:
                row["na"] = short_reason(e)
                session.progress.update(len(self.windows(L)))
            rows.append(row)
        return {"data": self.data.describe(), "train_len": self.target.train_len, "pe": self.target.run_cfg.pe.name,
                "rows": rows, "positions": self.positions_used}

    # -- report ----------------------------------------------------------------------------------------------
    @classmethod
    def markdown(cls, result: dict) -> str:
        n_layers = max((len(r["layers"]) for r in result["rows"]), default=0)
        header = ["length", "x train", *(f"layer {i}" for i in range(n_layers)), "mean over layers",
                  "learned sink's share (mean)"]
        rows = []
        for r in result["rows"]:
            sink = float(np.mean(r["sink"])) if r["sink"] else None
            layers = r["layers"] or [None] * n_layers
            rows.append([str(r["length"]), f"{r['length'] / result['train_len']:g}", *(fmt(v) for v in layers),
                         fmt(r["mean"]), fmt(sink)])
        notes = [f"- {r['length']}: n/a, {r['na']}" for r in result["rows"] if r["na"]]
        what = ("Mean attention probability on the window's first token (queries 1..L-1, all heads; non-overlapping "
                f"windows of {result['data']}).")
        return "\n".join([what + positions_note(result), "", md_table(header, rows), *([""] + notes if notes else [])])

    @classmethod
    def comparison(cls, results: dict[str, dict]) -> str:
        lengths = sorted({r["length"] for res in results.values() for r in res["rows"]})
        table = []
        for L in lengths:
            cells = [str(L)]
            for res in results.values():
                row = next((r for r in res["rows"] if r["length"] == L), None)
                cells.append(fmt(row["mean"]) if row else "-")
            table.append(cells)
        return "\n".join(["First-token attention mass (mean over layers, heads and queries 1..L-1):", "",
                          md_table(["length", *results], table)])
