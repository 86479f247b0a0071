"""k_back: label each item 1 if it equals the item k positions back, 0 if not; no target for the
first k items. A labelling task with yes/no label tokens (chance 0.5).

    tokens  a b a c b    (k=2)     targets  - - yes no no       text  "... a b a c b ->" + " yes no no"

Balanced by construction: for t >= k a fair coin picks the label, then item t copies item t-k (yes) or
is drawn from the other symbols (no), so labels are exactly Bernoulli(0.5). OOD = longer sequences
(defaults: ID 8-16 items, OOD 17-32).

`ask: last` asks only the last item (one yes/no answer, "Does the last letter equal the one k back?"):
the two letters compared sit at fixed offsets from the answer whatever the length, a relative-position
lookup a small pretrained LM picks up from a few thousand mixed-in examples, where answering every item
after the list needs each label aligned with its item (an induction-like circuit).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Literal

import numpy as np

from posbench.data.tasks.task import IGNORE, TASKS, Example, label_rows, require, uniform_int
from posbench.data.tasks.yes_no import YesNoConfig, YesNoTask


@TASKS.register("k_back")
class KBack(YesNoTask):
    summary = "does each item equal the one k positions back (n-back)"

    @dataclass
    class Config(YesNoConfig):
        k: int = 2
        n_symbols: int = 4  # letters a, b, c, d
        ask: Literal["every", "last"] = "every"  # which items are labelled

        def check(self) -> None:
            require(self.k >= 1, f"task `{self.name}`: k={self.k} must be >= 1")
            super().check()
            require(self.id_range[0] > self.k, f"task `{self.name}`: id_range must start above k={self.k} "
                                               f"so every sequence has a target")

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        n, k, m = uniform_int(rng, self.cfg.split_range(split)), self.cfg.k, self.cfg.n_symbols
        xs = [int(v) for v in rng.integers(m, size=k)]
        labels = []
        for _ in range(k, n):
            same = bool(rng.integers(2))
            back = xs[-k]
            xs.append(back if same else (back + 1 + int(rng.integers(m - 1))) % m)  # any symbol but `back`
            labels.append(same)
        items = [string.ascii_lowercase[v] for v in xs]
        if self.cfg.ask == "last":
            labels = labels[-1:]
            prompt = f"Does the last letter equal the one {k} back? {' '.join(items)} ->"
        else:
            prompt = f"Mark each letter that equals the one {k} back: {' '.join(items)} ->"
        label_ids = [IGNORE] * (n - len(labels)) + [self.label_id(s) for s in labels]
        tokens, targets = label_rows(self.vocab.ids(items), label_ids)
        return Example(prompt, " " + " ".join("yes" if s else "no" for s in labels), tokens, targets,
                       {"length": n, "positives": sum(labels), "labels": len(labels)})
