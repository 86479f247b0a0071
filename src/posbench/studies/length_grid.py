"""A study cell's length x depth grid (`study.eval.length_grid`): exact match by greedy decoding at multiples of the
training length, per long-context family and depth of the relevant item, as the long_context eval suite scores a
checkpoint (evaluation/suites/long_context.py) but in the task's own token form, on the study's trained models.

Every cell of the grid (family, length, depth) holds `per_cell` examples of the `ruler_mix` task
(data/tasks/ruler_mix.py) fitted to exactly that length, the same examples for every row and seed (eval.seed), so
seeds and rows are paired. Lengths up to the training length are drawn from the "id" split (disjoint from training by
content), longer ones from "ood". Families without a relevant item (variable tracking, the word-extraction tasks) have
one depth, 0.5, as in the eval suite. Beside each score: `chance` and `guess` (the examples' own, data/tasks/
long_context.py), `commonest` (the share of the cell's commonest gold answer when one repeats, else 0) and `baseline`
= max(chance, commonest), what effective length must beat.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from posbench.config_loader import Checked
from posbench.errors import ConfigError
from posbench.evaluation.dope import NoDope
from posbench.evaluation.task_accuracy import generated_exact

SPREAD_DEPTH = 0.5  # the one depth of a family whose answer is spread over the context


@dataclass
class LengthGridConfig(Checked):
    multiples: list[int] = field(default_factory=list)  # of the training length; [] = no grid
    depths: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])
    per_cell: int = 8  # examples per (family, length, depth)
    keep: float = 0.8  # effective length: the share of the in-distribution score a length must keep (report only)

    def check(self) -> None:
        if any(m < 1 for m in self.multiples) or len(set(self.multiples)) != len(self.multiples):
            raise ConfigError(f"study.eval.length_grid.multiples={self.multiples} must be distinct integers >= 1 "
                              "(multiples of the training length, e.g. [1, 2, 4, 8])")
        if self.multiples and 1 not in self.multiples:
            raise ConfigError("study.eval.length_grid.multiples must include 1: effective length is measured "
                              "against the in-distribution score at the training length")
        if not self.depths or any(not 0.0 <= d <= 1.0 for d in self.depths):
            raise ConfigError(f"study.eval.length_grid.depths={self.depths} must be a non-empty list in [0, 1]")
        if self.per_cell < 1 or not 0.0 < self.keep <= 1.0:
            raise ConfigError(f"study.eval.length_grid needs per_cell >= 1 (got {self.per_cell}) and keep in (0, 1] "
                              f"(got {self.keep})")

    @property
    def active(self) -> bool:
        return bool(self.multiples)

    def lengths(self, train_len: int) -> list[int]:
        return sorted(m * train_len for m in self.multiples)


def grid_examples(task, grid: LengthGridConfig, seed: int, train_len: int):
    """(family, length, depth, examples) of every grid cell, in a fixed order; example indices are unique per cell."""
    cells, lengths = [], grid.lengths(train_len)
    for f, family in enumerate(task.families):
        depths = grid.depths if family.depth_controlled else [SPREAD_DEPTH]
        for li, length in enumerate(lengths):
            split = "id" if length <= train_len else "ood"
            for di, depth in enumerate(depths):
                first = ((f * len(lengths) + li) * len(grid.depths) + di) * grid.per_cell
                examples = [task.example_at(seed, first + j, f, length, depth, split) for j in range(grid.per_cell)]
                cells.append((family.name, length, depth, examples))
    return cells


def baselines(examples) -> dict:
    chance = float(np.mean([ex.info["chance"] for ex in examples]))
    top = max(Counter(ex.answer for ex in examples).values())
    commonest = top / len(examples) if top > 1 else 0.0
    return {"chance": chance, "guess": float(np.mean([ex.info["guess"] for ex in examples])),
            "commonest": commonest, "baseline": max(chance, commonest)}


def calibration_examples(task, grid: LengthGridConfig, train_len: int):
    """DoPE's calibration rows at a grid length: `n` examples fitted to it, drawn with DoPE's seed, the families
    (and their depths) taken in turn."""
    def rows(length: int, n: int, seed: int):
        split = "id" if length <= train_len else "ood"
        kinds = [(f, d) for f, family in enumerate(task.families)
                 for d in (grid.depths if family.depth_controlled else [SPREAD_DEPTH])]
        return [task.example_at(seed, i, *kinds[i % len(kinds)], length, split).tokens_T
                for i in range(n)]
    return rows


def grid_result(model, task, grid: LengthGridConfig, seed: int, train_len: int, dope=None) -> dict:
    """{"length_grid": {...}} for a cell's final model, or {} when the study has no grid. A length the PE cannot
    represent is n/a (exact None), never 0. `dope` (evaluation/dope.py's Dope, an arm's): each length scored with
    the heads it chose on that length's calibration rows."""
    if not grid.active:
        return {}
    dope = dope or NoDope()
    planned = grid_examples(task, grid, seed, train_len)
    by_length: dict[int, list] = {}
    for family, length, depth, examples in planned:
        by_length.setdefault(length, []).append((family, length, depth, examples))
    cells = []
    for length, asked in by_length.items():
        with dope.at(model, length, calibration_examples(task, grid, train_len), "length_grid"):
            for family, length, depth, examples in asked:
                exact = generated_exact(model, task, examples)
                cells.append({"family": family, "length": length, "depth": depth, "n": len(examples),
                              "exact": None if exact is None else float(np.mean(exact)), **baselines(examples),
                              **({"na": "the PE cannot represent this length"} if exact is None else {})})
    order = {(f, L, d): i for i, (f, L, d, _) in enumerate(planned)}
    cells.sort(key=lambda c: order[(c["family"], c["length"], c["depth"])])  # the grid's order, family first
    return {"length_grid": {"train_len": train_len, "lengths": grid.lengths(train_len), "cells": cells}}
