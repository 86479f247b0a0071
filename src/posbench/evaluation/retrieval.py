"""Shared machinery of the retrieval grids (passkey, needle-in-a-haystack): accuracy by context length
x depth of the fact, greedy decoding, exact match of the retrieved digits.

A cell (L, depth) asks n_samples prompts of at most L tokens in the checkpoint's tokenizer. The task
generators place facts in filler *units* (words), so each example is fitted: the unit count whose
`<|bos|> prompt` + answer comes closest to L tokens without exceeding it (`fit`), with the fact after
round(depth x units) units. The mean token count of each cell is reported next to its accuracy.

In distribution: a grid has a cell at the training length (the default lengths include it). The task's
full prompt (passkey: an instruction, the fact twice, a question) takes ~250 tokens in bytes; when the
question and answer alone would take more than half the training length, the grid asks the task's short prompt
(`prompt: short`) at every length instead, so the training length holds a haystack at least as long as the
question, and the report says which prompt it asked and why. A cell still too short for the question and answer
is n/a and says how many tokens they need.

Filler: `auto` decodes the checkpoint corpus's filler shards (data.splits.filler, kept out of training)
when they are tokenized, else uses the task's own filler (passkey: the classic "The grass is green..."
haystack; needle: generated sentences); `task` and `corpus` force one. Words with digits are dropped
from corpus filler, so the only number in the haystack is the one to retrieve.

A subclass says which task it runs and how to place a fact (`make_example`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import torch

from posbench.config_loader import Checked
from posbench.data.layout import DataLayout
from posbench.data.loader import split_shards
from posbench.data.shards import open_shard
from posbench.data.tasks import Example, Task, TextFiller, build_task
from posbench.errors import ConfigError, DataError, brief
from posbench.evaluation import data_ids, eval_plots
from posbench.evaluation.evaluator import Evaluator, Session, Target
from posbench.evaluation.generate import decode, greedy_generate
from posbench.evaluation.lengths import check_lengths
from posbench.evaluation.markdown import fmt, md_table, pct

CORPUS_FILLER_TOKENS = 1 << 20  # tokens of filler shards decoded (the filler wraps around when shorter)
SCAN_MISSES, SCAN_MAX = 8, 64  # fit(): stop the upward scan after 8 misses in a row, or 64 units


@dataclass(frozen=True)
class GridConfig(Checked):
    lengths: list[int] = field(default_factory=list)  # [] = the evaluation's --lengths
    depths: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])
    n_samples: int = 8  # prompts per cell
    filler: Literal["auto", "task", "corpus"] = "auto"
    task_name: ClassVar[str] = ""

    def check(self) -> None:
        if self.n_samples < 1 or not self.depths or any(not 0.0 <= d <= 1.0 for d in self.depths):
            raise ConfigError(f"{self.task_name}: need n_samples >= 1 and depths in [0, 1], got {brief(self.depths)}")
        check_lengths(self.lengths, f"{self.task_name}.lengths")
        if self.task.name != self.task_name:
            raise ConfigError(f"{self.task_name}.task must be a `{self.task_name}` task config, got `{self.task.name}`")


def corpus_filler(run_cfg, tokenizer) -> TextFiller:
    """Text of the corpus's filler shards, split into documents at <|bos|>, digit-free."""
    layout = DataLayout.from_config(run_cfg.data)
    texts, have = [], 0
    for path in split_shards(layout, run_cfg.data.splits, "filler"):
        _, tokens = open_shard(path, tokenizer.fingerprint)
        chunk = np.asarray(tokens[: CORPUS_FILLER_TOKENS - have])
        have += len(chunk)
        for doc in np.split(chunk, np.flatnonzero(chunk == tokenizer.bos_id)):
            words = [w for w in tokenizer.decode(doc[doc != tokenizer.bos_id]).split()
                     if not any(ch.isdigit() for ch in w)]
            if words:
                texts.append(" ".join(words))
        if have >= CORPUS_FILLER_TOKENS:
            break
    return TextFiller(texts)


class RetrievalGrid(Evaluator):
    per_cell = "n_samples"
    calibrates_dope = True

    def __init__(self, cfg: GridConfig, target: Target):
        super().__init__(cfg, target)
        self.lengths = sorted(set(cfg.lengths or target.lengths))
        filler, self.filler_name = self.load_filler()
        self.task: Task = build_task(cfg.task, filler)
        # None: the task has one prompt form
        self.prompt_form, self.prompt_why = getattr(cfg.task, "prompt", None), None
        need, room = self.bare_tokens(0, 0.0), target.train_len // 2
        if self.prompt_form == "full" and need > room:
            self.task = build_task(replace(cfg.task, prompt="short"), filler)
            self.prompt_form = "short"
            self.prompt_why = (f"the full prompt's question and answer take {need} tokens, more than half the "
                               f"training length ({target.train_len})")

    def load_filler(self):
        """(the corpus's filler text or None for the task's own, its name) as `filler` asks."""
        if self.cfg.filler != "task":
            try:
                return corpus_filler(self.target.run_cfg, self.target.tokenizer), "corpus"
            except DataError as e:
                if self.cfg.filler == "corpus":
                    raise DataError(f"{self.name}.filler=corpus: {e}") from None
        return None, "task"

    def make_example(self, index: int, units: int, depth: float, seed: int) -> Example:
        """Example `index` of the task drawn with `seed` (the evaluation's; DoPE's calibration draws its own), its
        fact after round(depth x units) filler units."""
        raise NotImplementedError

    @property
    def dope_label(self) -> str:
        """What results.json's DoPE records call this grid."""
        return self.name

    def calibration_rows(self, L: int, n: int, seed: int) -> list[torch.Tensor]:
        """DoPE's calibration rows at length L: n prompts fitted to L as the scored ones are (the depths in turn),
        drawn with `seed`; none where the prompt cannot fit."""
        rows = []
        for i in range(n):
            fitted = self.fit(i, L, self.cfg.depths[i % len(self.cfg.depths)], seed)
            if fitted is not None:
                rows.append(torch.tensor(fitted[0], dtype=torch.long))
        return rows

    def cell_extra(self, depth: float, fitted: list) -> dict:
        """More figures for a measured cell from its fitted examples ((prompt ids, answer, n_new, units) each)."""
        return {}

    def work(self) -> int:
        return len(self.lengths) * len(self.cfg.depths) * self.cfg.n_samples

    def encode(self, ex: Example) -> tuple[list[int], list[int]]:
        tok = self.target.tokenizer
        return [tok.bos_id] + tok.encode(ex.prompt), tok.encode(ex.answer)

    def bare_tokens(self, index: int, depth: float) -> int:
        """Tokens of `<|bos|> prompt` + answer with no filler: what any length must hold."""
        prompt, answer = self.encode(self.make_example(index, 0, depth, self.target.seed))
        return len(prompt) + len(answer)

    def fit(self, index: int, L: int, depth: float, seed: int | None = None):
        """(prompt ids, answer, n_new, units) of the longest example that fits in L tokens, or None; drawn with
        `seed` (None: the evaluation's).

        Token count grows with units but not monotonically: the filler words drawn change with the unit
        count, and sentence alignment drops up to a sentence (corpus text with long unpunctuated runs
        drops more). So: bisection for the region, then an upward scan that keeps the longest fit and
        stops after SCAN_MISSES units in a row that do not fit (8 builds with regular filler)."""
        seed = self.target.seed if seed is None else seed

        def size(units):
            ex = self.make_example(index, units, depth, seed)
            prompt, answer = self.encode(ex)
            return len(prompt) + len(answer), (prompt, ex.answer, len(answer), units)

        n, found = size(0)
        if n > L:
            return None
        best = (n, found)
        # every unit is a word (>= 1 token); sentence alignment may drop a few, so 2L + 64 units never fit
        lo, hi = 0, 2 * L + 64
        while hi - lo > 1:
            mid = (lo + hi) // 2
            n, found = size(mid)
            if n <= L:
                lo, best = mid, max(best, (n, found), key=lambda b: b[0])
            else:
                hi = mid
        misses, units = 0, lo
        while misses < SCAN_MISSES and units < lo + SCAN_MAX:
            units += 1
            n, found = size(units)
            misses = misses + 1 if n > L else 0
            if n <= L and n > best[0]:
                best = (n, found)
        return best[1]

    def run(self, session: Session) -> dict:
        tok = self.target.tokenizer
        plan = []  # (length, depth, fitted or None) per prompt
        # filler shards never carry ids: a run that trained with them reads the prompt as text (data_ids.py), every
        # token TEXT_ID, which no position limit of the PE bounds
        text_ids = data_ids.trained_with_ids(self.target.run_cfg)
        limit = None if text_ids else self.target.max_positions
        for L in self.lengths:
            # no haystack is built for a length the PE cannot represent: at an absurd length it would
            # allocate the whole prompt before the model refused it
            beyond = limit is not None and L > limit
            for depth in self.cfg.depths:
                plan += [(L, depth, None if beyond else self.fit(i, L, depth)) for i in range(self.cfg.n_samples)]
        asked = [k for k, (_, _, f) in enumerate(plan) if f is not None]
        got = {}
        for L in self.lengths:  # one length at a time: DoPE calibrates at each (a no-op without --dope)
            at_L = [k for k in asked if plan[k][0] == L]
            if not at_L:
                continue
            with session.dope.at(session.model, L, self.calibration_rows, self.dope_label):
                outputs = greedy_generate(session.model, [plan[k][2][0] for k in at_L], [plan[k][2][2] for k in at_L],
                                          session.device, self.target.batch_size, session.autocast, session.progress,
                                          text_ids)
            got.update(zip(at_L, outputs, strict=True))
        session.progress.update(len(plan) - len(asked))
        cells = []
        for L in self.lengths:
            for depth in self.cfg.depths:
                ks = [k for k, (l2, d2, _) in enumerate(plan) if l2 == L and d2 == depth]
                fitted = [plan[k][2] for k in ks]
                if any(f is None for f in fitted):
                    beyond = limit is not None and L > limit
                    need = max(self.bare_tokens(i, depth) for i in range(self.cfg.n_samples)) if not beyond else 0
                    cells.append({"length": L, "depth": depth, "accuracy": None, "n": len(ks), "correct": None,
                                  "tokens_mean": None, "units_mean": None,
                                  "na": (f"the PE represents at most {limit} positions" if beyond else
                                         f"{L} tokens cannot hold the {self.prompt_form or 'task'} prompt's "
                                         f"question and answer (up to {need} tokens with no filler)")})
                    continue
                outs = [got[k] for k in ks]
                tokens_mean = float(np.mean([len(f[0]) + f[2] for f in fitted]))
                units_mean = float(np.mean([f[3] for f in fitted]))
                if any(o is None for o in outs):
                    cells.append({"length": L, "depth": depth, "accuracy": None, "n": len(ks), "correct": None,
                                  "tokens_mean": tokens_mean, "units_mean": units_mean,
                                  "na": f"{L} tokens is more positions than the PE represents"})
                    continue
                correct = sum(decode(tok, o) == f[1] for o, f in zip(outs, fitted, strict=True))
                cells.append({"length": L, "depth": depth, "accuracy": correct / len(ks), "n": len(ks),
                              "correct": correct, "tokens_mean": tokens_mean, "units_mean": units_mean, "na": None,
                              **self.cell_extra(depth, fitted)})
        by_length = {}
        for L in self.lengths:
            accs = [c["accuracy"] for c in cells if c["length"] == L]
            by_length[str(L)] = None if any(a is None for a in accs) else float(np.mean(accs))
        return {"lengths": self.lengths, "depths": list(self.cfg.depths), "n_samples": self.cfg.n_samples,
                "filler": self.filler_name, "prompt": self.prompt_form, "prompt_why": self.prompt_why,
                "positions": data_ids.text_positions(self.target.run_cfg),
                "train_len": self.target.train_len, "seed": self.target.seed, "cells": cells, "by_length": by_length}

    # -- report ----------------------------------------------------------------------------------------------
    @staticmethod
    def grid(result: dict) -> np.ndarray:
        """(depth, length) accuracies, NaN where n/a."""
        acc = {(c["length"], c["depth"]): c["accuracy"] for c in result["cells"]}
        return np.array([[np.nan if acc[(L, d)] is None else acc[(L, d)] for L in result["lengths"]]
                         for d in result["depths"]], dtype=float)

    @classmethod
    def markdown(cls, result: dict) -> str:
        cells = {(c["length"], c["depth"]): c for c in result["cells"]}
        header = ["length", *(f"depth {d:g}" for d in result["depths"]), "mean", "tokens (mean)"]
        rows = []
        for L in result["lengths"]:
            row = [cells[(L, d)] for d in result["depths"]]
            tokens = [c["tokens_mean"] for c in row if c["tokens_mean"] is not None]
            rows.append([str(L), *(pct(c["accuracy"]) for c in row), pct(result["by_length"][str(L)]),
                         fmt(float(np.mean(tokens)) if tokens else None, 0)])
        notes = [f"- {L}: n/a, {na}" for L, na in sorted({(c["length"], c["na"]) for c in result["cells"] if c["na"]})]
        prompt = (result.get("prompt") or "the task's") + (f" ({result['prompt_why']})" if result.get("prompt_why")
                                                           else "")
        train_len = result.get("train_len")
        in_dist = "" if train_len is None else \
            f" Lengths up to {train_len} tokens (the training length) are in distribution."
        return "\n".join([f"{result['n_samples']} prompts per cell, filler: {result['filler']}, prompt: {prompt}."
                          + in_dist, "", md_table(header, rows), *([""] + notes if notes else [])])

    @classmethod
    def comparison(cls, results: dict[str, dict]) -> str:
        lengths = sorted({L for res in results.values() for L in res["lengths"]})
        rows = [[str(L), *(pct(res["by_length"].get(str(L))) if str(L) in res["by_length"] else "-"
                           for res in results.values())] for L in lengths]
        notes = [f"- {label} {L}: n/a, {na}" for label, res in results.items()
                 for L, na in sorted({(c["length"], c["na"]) for c in res["cells"] if c.get("na")})]
        prompts = [f"- {label}: prompt {res['prompt']}" + (f" ({res['prompt_why']})" if res.get("prompt_why") else "")
                   for label, res in results.items() if res.get("prompt")]
        return "\n".join(["Accuracy by length (mean over depths):", "", md_table(["length", *results], rows),
                          *([""] + prompts + notes if prompts or notes else [])])

    @classmethod
    def plots(cls, results: dict[str, dict], out_dir: Path) -> list[Path]:
        first = next(iter(results.values()))
        same_axes = all(r["lengths"] == first["lengths"] and r["depths"] == first["depths"] for r in results.values())
        groups = [results] if same_axes else [{k: v} for k, v in results.items()]
        paths = []
        for i, group in enumerate(groups):
            res = next(iter(group.values()))
            suffix = "" if len(groups) == 1 else f"_{i}"
            paths.append(eval_plots.heatmaps(out_dir / f"{cls.name}_heatmap{suffix}.png",
                                        {label: cls.grid(r) for label, r in group.items()},
                                        [str(L) for L in res["lengths"]], [f"{d:g}" for d in res["depths"]],
                                        "context length (tokens)", "depth of the fact", cls.title))
        return paths
