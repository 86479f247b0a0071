"""Perplexity vs context length, under two protocols, with a per-position loss curve.

Shape legend: B windows in a batch, L window length (the context length evaluated), V vocabulary.

    nonoverlap  the stream cut into windows of L tokens; every token scored once, with 0..L-1 tokens of
                context (the mean over positions; what a model trained at length L would be asked)
    sliding     windows of L tokens every S tokens (S = ppl.stride, default L/2); the first window
                scores all its tokens, later ones only their last S, so every token is scored once
                with at least L - S tokens of context (the HF "perplexity of fixed-length models" recipe)

Both protocols score the same leading span of the stream (about ppl.max_tokens tokens per length).
The per-position curve is the non-overlapping loss at each position of the window, averaged over
windows and binned: where it rises past the training length is where a PE stops extrapolating.
A length the PE cannot represent (learned table) is an "n/a" row: no number, no exception.
A PE that trained on the shards' own position ids (abacus, coupled; evaluation/data_ids.py) gets the
validation shards' ids windowed exactly as the tokens, or TEXT_ID per token for text that has none;
the result's `positions` says which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F

from posbench.config_loader import Checked
from posbench.data.token_positions import TEXT_ID
from posbench.errors import ConfigError, DataError
from posbench.evaluation import data_ids, eval_plots
from posbench.evaluation.evaluator import Evaluator, Session, Target
from posbench.evaluation.lengths import LOGIT_ELEMENTS  # float32 logits at once: the chunk the memory check counts
from posbench.evaluation.markdown import fmt, md_table, short_reason
from posbench.evaluation.ppl_data import PplData, PplDataConfig, ValidationShards, build_ppl_data
from posbench.evaluation.suite_registry import SUITES
from posbench.pe import PositionRangeError


@dataclass(frozen=True)
class PplConfig(Checked):
    data: PplDataConfig = field(default_factory=ValidationShards.Config)
    protocols: list[Literal["nonoverlap", "sliding"]] = field(default_factory=lambda: ["nonoverlap", "sliding"])
    stride: int = 0  # sliding-window stride in tokens; 0 = half of each window
    max_tokens: int = 131072  # tokens scored per length and protocol (at least one window)
    curve_bins: int = 32  # points of the per-position loss curve
    max_windows: int = 0  # windows per length and protocol, the first ones (0: as many as max_tokens gives)

    def check(self) -> None:
        if self.stride < 0 or self.max_tokens < 1 or self.curve_bins < 1 or self.max_windows < 0:
            raise ConfigError("ppl: need stride >= 0 (0 = half the window), max_tokens >= 1, curve_bins >= 1, "
                              "max_windows >= 0 (0 = no cap)")


class WindowProtocol:
    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    curve: ClassVar[bool] = False  # every window scores positions 0..L-1: a loss-by-position curve exists
    style: ClassVar[str] = "-"  # line style in plots

    def __init__(self, stride: int):
        self.stride = stride

    def windows(self, L: int, budget: int, available: int) -> tuple[list[int], list[int]]:
        """(start, first scored position) of each window of L tokens; needs start + L + 1 <= available."""
        raise NotImplementedError

    def info(self, L: int) -> dict:
        return {}


class NonOverlapping(WindowProtocol):
    name, label, curve = "nonoverlap", "non-overlapping", True

    def windows(self, L, budget, available):
        n = max(1, min(budget // L, (available - 1) // L))
        return [k * L for k in range(n)], [0] * n


class SlidingWindow(WindowProtocol):
    name, label, style = "sliding", "sliding window", "--"

    def step(self, L: int) -> int:
        return min(L, self.stride) if self.stride else max(1, L // 2)

    def windows(self, L, budget, available):
        S = self.step(L)
        m = max(0, min((budget - L) // S, (available - 1 - L) // S))
        return [k * S for k in range(m + 1)], [0] + [L - S] * m

    def info(self, L):
        return {"stride": self.step(L)}


PROTOCOLS = {p.name: p for p in (NonOverlapping, SlidingWindow)}


def text_stream(data_cfg: PplDataConfig, target: Target, need: int
                ) -> tuple[PplData, np.ndarray, np.ndarray | None, str]:
    """(source, its first `need` tokens, their position ids or None, which positions those are), loaded at plan
    time so missing data fails before any work. A run that trained with the data's ids reads the stream with
    them (TEXT_ID where the text has none)."""
    data = build_ppl_data(data_cfg, target.run_cfg, target.tokenizer)
    stream = data.tokens(need)
    short = [L for L in target.lengths if len(stream) < L + 1]
    if short:
        raise DataError(f"perplexity data {data.describe()} has {len(stream)} tokens; length "
                        f"{short[0]} needs at least {short[0] + 1}. Give more text or drop the longer lengths")
    if not data_ids.trained_with_ids(target.run_cfg):
        return data, stream, None, data_ids.OWN
    ids = data.positions(len(stream))
    if ids is None:
        return data, stream, np.full(len(stream), TEXT_ID, np.int64), data_ids.TEXT_IDS
    return data, stream, ids, data_ids.SHARD_IDS


def token_losses(model, x_BL: torch.Tensor, y_BL: torch.Tensor, data_pos_BL: torch.Tensor | None = None
                 ) -> torch.Tensor:
    """Per-token cross-entropy (B, L) in float32; logits made a slice at a time to bound memory. `data_pos_BL`:
    the inputs' position ids from the data, None for the model's own positions."""
    # without data ids the call passes none: Mamba's `hidden` takes no such keyword
    h_BLD, _ = model.hidden(x_BL) if data_pos_BL is None else model.hidden(x_BL, data_pos_BT=data_pos_BL)
    B, L = y_BL.shape
    V = model.lm_head.out_features
    out = torch.empty(B, L, dtype=torch.float32, device=y_BL.device)
    step = max(1, LOGIT_ELEMENTS // (B * V))
    for a in range(0, L, step):
        logits = model.lm_head(h_BLD[:, a:a + step]).float()
        out[:, a:a + step] = F.cross_entropy(logits.flatten(0, 1), y_BL[:, a:a + step].flatten(),
                                             reduction="none").view(B, -1)
    return out


def positions_note(result: dict) -> str:
    """The report's note on positions when the data's ids (or TEXT_ID) were given; "" for the model's own (and for
    results written before the key existed)."""
    used = result.get("positions", data_ids.OWN)
    return "" if used == data_ids.OWN else f" Positions: {used}."


def binned_curve(loss_L: np.ndarray, bins: int) -> dict:
    edges = np.unique(np.linspace(0, len(loss_L), min(bins, len(loss_L)) + 1).round().astype(int))
    return {"start": edges[:-1].tolist(), "end": edges[1:].tolist(),
            "loss": [float(loss_L[a:b].mean()) for a, b in zip(edges[:-1], edges[1:], strict=True)]}


def _tokens(value: dict) -> str:
    """The tokens a perplexity was scored over: two perplexities compare only at equal counts."""
    return f"{value['tokens']:,}" if value.get("tokens") is not None else "n/a"


@SUITES.register("ppl")
class Perplexity(Evaluator):
    title = "Perplexity vs context length"
    options = PplConfig
    order = 1
    per_cell = "max_windows"
    calibrates_dope = True

    def __init__(self, cfg: PplConfig, target: Target):
        super().__init__(cfg, target)
        self.protocols = [PROTOCOLS[name](cfg.stride) for name in cfg.protocols]
        need = max(L * max(1, cfg.max_tokens // L) + 1 for L in target.lengths)
        self.data, self.stream, self.ids, self.positions_used = text_stream(cfg.data, target, need)

    def plan(self, L: int, protocol: WindowProtocol) -> tuple[list[int], list[int]]:
        starts, skips = protocol.windows(L, self.cfg.max_tokens, len(self.stream))
        cap = self.cfg.max_windows or None
        return starts[:cap], skips[:cap]

    def work(self) -> int:
        return sum(len(self.plan(L, p)[0]) for L in self.target.lengths for p in self.protocols)

    @classmethod
    def forward_rows(cls, options: PplConfig, target: Target, L: int) -> int:
        # about batch_size x training length tokens per forward, whatever the window length
        return max(1, target.batch_size * target.train_len // L)

    def rows_per_batch(self, L: int) -> int:
        return self.forward_rows(self.cfg, self.target, L)

    def score(self, session: Session, L: int, protocol: WindowProtocol) -> tuple[dict, np.ndarray | None]:
        starts, score_from = self.plan(L, protocol)
        stream = torch.from_numpy(self.stream)
        ids = None if self.ids is None else torch.from_numpy(self.ids)
        total, count = 0.0, 0
        curve_L = torch.zeros(L, dtype=torch.float64)
        rows = self.rows_per_batch(L)
        for a in range(0, len(starts), rows):
            idx = [torch.arange(s, s + L + 1) for s in starts[a:a + rows]]
            win_BL = stream[torch.stack(idx)].to(session.device)
            x_BL, y_BL = win_BL[:, :-1], win_BL[:, 1:]
            pos_BL = None if ids is None else ids[torch.stack(idx)][:, :-1].to(session.device)  # the inputs' ids
            mask_BL = torch.arange(L, device=session.device)[None, :] >= torch.tensor(
                score_from[a:a + rows], device=session.device)[:, None]
            with torch.no_grad(), session.autocast():
                loss_BL = token_losses(session.model, x_BL, y_BL, pos_BL)
            total += float(loss_BL[mask_BL].double().sum())
            count += int(mask_BL.sum())
            curve_L += loss_BL.double().sum(0).cpu()
            session.progress.update(len(idx))
        loss = total / count
        if not math.isfinite(loss):  # a diverged checkpoint: say so rather than fail writing NaN to JSON
            return None, None
        # exp overflows a float past ~709 nats; the loss still says everything then
        out = {"loss": loss, "ppl": math.exp(loss) if loss < 700 else None, "tokens": count, "windows": len(starts),
               **protocol.info(L)}
        return out, (curve_L / len(starts)).numpy() if protocol.curve else None

    def calibration_rows(self, L: int, n: int, seed: int) -> torch.Tensor:
        """n windows of L tokens of the scored text at starts drawn with `seed` (DoPE's calibration)."""
        starts = torch.randint(0, len(self.stream) - L + 1, (n,), generator=torch.Generator().manual_seed(seed))
        stream = torch.from_numpy(self.stream)
        return torch.stack([stream[s:s + L] for s in starts.tolist()])

    def run(self, session: Session) -> dict:
        rows = []
        for L in self.target.lengths:
            row: dict = {"length": L, "na": None, **{p.name: None for p in self.protocols}, "curve": None}
            try:
                with session.dope.at(session.model, L, self.calibration_rows, self.name):
                    for p in self.protocols:
                        row[p.name], curve = self.score(session, L, p)
                        if row[p.name] is None:
                            row["na"] = "non-finite loss (the checkpoint's logits are NaN or inf)"
                        if curve is not None:
                            row["curve"] = binned_curve(curve, self.cfg.curve_bins)
            except PositionRangeError as e:
                row.update({p.name: None for p in self.protocols}, curve=None, na=short_reason(e))
                session.progress.update(sum(len(self.plan(L, p)[0]) for p in self.protocols))
            rows.append(row)
        return {"data": self.data.describe(), "stream_tokens": len(self.stream), "train_len": self.target.train_len,
                "pe": self.target.run_cfg.pe.name,  # the line's colour in the plots (posbench.palette)
                "protocols": [p.name for p in self.protocols], "rows": rows, "positions": self.positions_used}

    # -- report ----------------------------------------------------------------------------------------------
    @classmethod
    def markdown(cls, result: dict) -> str:
        header = ["length", "x train"]
        for name in result["protocols"]:
            header += [f"loss ({PROTOCOLS[name].label})", f"ppl ({PROTOCOLS[name].label})",
                       f"tokens scored ({PROTOCOLS[name].label})"]
        rows = []
        for r in result["rows"]:
            cells = [str(r["length"]), f"{r['length'] / result['train_len']:g}"]
            for name in result["protocols"]:
                v = r[name] or {}
                stride = f" (S={v['stride']})" if "stride" in v else ""
                cells += [fmt(v.get("loss")), fmt(v.get("ppl"), 2) + stride, _tokens(v)]
            rows.append(cells)
        notes = [f"- {r['length']}: n/a, {r['na']}" for r in result["rows"] if r["na"]]
        data = f"Data: {result['data']}." + positions_note(result)
        return "\n".join([data, "", md_table(header, rows), *([""] + notes if notes else [])])

    @classmethod
    def comparison(cls, results: dict[str, dict]) -> str:
        lengths = sorted({r["length"] for res in results.values() for r in res["rows"]})
        parts = []
        for name in ("nonoverlap", "sliding"):
            if not any(name in res["protocols"] for res in results.values()):
                continue
            table = []
            for L in lengths:
                cells = [str(L)]
                for res in results.values():
                    row = next((r for r in res["rows"] if r["length"] == L), None)
                    value = row.get(name) if row else None
                    cells.append(fmt(value["ppl"] if value else None, 2) + (f" ({_tokens(value)} tokens)" if value
                                                                             else "") if row else "-")
                table.append(cells)
            parts += [f"Perplexity, {PROTOCOLS[name].label}:", "", md_table(["length", *results], table), ""]
        notes = [f"- {label} {r['length']}: n/a, {r['na']}" for label, res in results.items() for r in res["rows"]
                 if r.get("na")]
        notes += [f"- {label}:{positions_note(res)}" for label, res in results.items() if positions_note(res)]
        return "\n".join(parts + notes).rstrip()

    @classmethod
    def plots(cls, results: dict[str, dict], out_dir: Path) -> list[Path]:
        series = {}
        colours = eval_plots.checkpoint_colours({label: res.get("pe", label) for label, res in results.items()})
        for label, res in results.items():
            for name in res["protocols"]:
                pts = [(r["length"], r[name]["ppl"]) for r in res["rows"] if r[name] and r[name]["ppl"] is not None]
                series[f"{label} ({PROTOCOLS[name].label})"] = (pts, PROTOCOLS[name].style, colours[label])
        train_lens = sorted({res["train_len"] for res in results.values()})
        marks = {f"trained at {n}": n for n in train_lens}
        paths = [eval_plots.lines(out_dir / "ppl_vs_length.png", series, "context length (tokens)", "perplexity",
                             "Perplexity vs context length", logx=True, logy=True, marks=marks)]
        curves = {}
        for label, res in results.items():
            with_curve = [r for r in res["rows"] if r["curve"]]
            if with_curve:
                r = with_curve[-1]  # the longest length the PE represents
                c = r["curve"]
                mid = [(a + b - 1) / 2 for a, b in zip(c["start"], c["end"], strict=True)]
                curves[f"{label} (L={r['length']})"] = (list(zip(mid, c["loss"], strict=True)), "-", colours[label])
        if curves:
            paths.append(eval_plots.lines(out_dir / "loss_vs_position.png", curves, "position in window",
                                     "loss (nats)", "Loss by position (non-overlapping windows)", marks=marks))
        return paths
