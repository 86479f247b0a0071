"""ruler_mix: the RULER-style long-context families as one task whose lengths are counted in tokens, so a small model
can be trained on all of them at once and tested at multiples of its training length (studies' `length_grid`).

Each example comes from one family of `families` (in the shares `weights` gives, equal by default), at a length L
in tokens (uniform in the split's range) and a depth (uniform in [0, 1]): the family's example with the most units
(filler words, pairs, list words) that fits in L tokens, then padded to exactly L tokens with spaces before it
(fewer than one unit's bytes), so every example of a length has that length and a length's prompts decode as one
batch. A family whose example with no units is longer than L keeps that length (its needles and question alone);
one longer than the split's longest length is refused. Token form: the families' own, the UTF-8 bytes (ids 1..256,
0 is <pad>), targets on the answer's bytes. `info` is the family's, plus `family`, `length` (tokens) and `pad`
(spaces before the text).

The defaults are each family's options shrunk to fit a 128-token context with room for a haystack (4-digit values,
two values or queries where RULER asks four, a one-hop chain, two common or frequent words); multi-key NIAH keeps
RULER's four keys, so its question-blind baseline (`guess`) stays 1/4.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from posbench.data.tasks.long_context import BYTE_SYMBOLS, LongContextTask, text_example
from posbench.data.tasks.task import TASKS, Example, Task, TaskConfig, Vocab, build_task, get_task_class, require
from posbench.errors import ConfigError

PROBE_UNITS = 8  # units rendered once to estimate a family's bytes per unit before the exact fit


def default_families() -> list[TaskConfig]:
    options = [("niah_single", {"value_digits": 4}), ("niah_multikey", {"value_digits": 4}),
               ("niah_multivalue", {"value_digits": 4, "n_values": 2}),
               ("niah_multiquery", {"value_digits": 4, "n_keys": 2, "n_queries": 2}),
               ("variable_tracking", {"n_hops": 1, "value_digits": 4}),
               ("common_words", {"n_common": 2, "freq_common": 3}), ("frequent_words", {"n_answer": 2}),
               ("kv_retrieval", {})]
    return [get_task_class(name).Config(**kw) for name, kw in options]


@TASKS.register("ruler_mix")
class RulerMix(Task):
    summary = "the RULER-style long-context families mixed, each example fitted to a length in tokens"

    @dataclass
    class Config(TaskConfig):
        id_range: tuple[int, int] = (64, 128)  # tokens (bytes)
        ood_range: tuple[int, int] = (129, 1024)
        families: list[TaskConfig] = field(default_factory=default_families)
        weights: dict[str, float] = field(default_factory=dict)  # family -> relative share of examples (default 1)
        range_min: ClassVar[float] = 16

        def check(self) -> None:
            super().check()
            names = [f.name for f in self.families]
            require(bool(names), f"task `{self.name}`: families is empty; list at least one long-context family")
            require(len(set(names)) == len(names), f"task `{self.name}`: families lists a family twice: {names}")
            for name in names:
                require(issubclass(get_task_class(name), LongContextTask),
                        f"task `{self.name}`: `{name}` is not a long-context family (niah_*, variable_tracking, "
                        "common_words, frequent_words, kv_retrieval)")
            unknown = sorted(set(self.weights) - set(names))
            require(not unknown, f"task `{self.name}`: weights name {unknown}, which families does not list ({names})")
            require(all(isinstance(w, (int, float)) and w > 0 for w in self.weights.values()),
                    f"task `{self.name}`: weights {self.weights} must be numbers > 0 (drop a family to leave it out)")

    def __init__(self, cfg: TaskConfig, filler=None):
        super().__init__(cfg, filler)
        self.families = [build_task(f, filler) for f in cfg.families]
        w = np.array([float(cfg.weights.get(f.name, 1.0)) for f in cfg.families])
        self.shares = w / w.sum()

    def build_vocab(self) -> Vocab:
        return Vocab(BYTE_SYMBOLS)

    @property
    def chance_accuracy(self) -> float:
        return 1 / 256  # a byte; exact match of whole answers by chance is `info["chance"]`

    def max_tokens(self, split: str) -> int:
        return self.cfg.split_range(split)[1]

    def family_index(self, name: str) -> int:
        return [f.name for f in self.families].index(name)

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        lo, hi = self.cfg.split_range(split)
        family, length = int(rng.choice(len(self.families), p=self.shares)), int(rng.integers(lo, hi + 1))
        return self.fitted(rng, family, length, float(rng.random()), split)

    def example_at(self, seed: int, index: int, family: int, length: int, depth: float, split: str) -> Example:
        """Example `index` of family number `family` fitted to `length` tokens, its relevant item (where the family
        has one) at `depth`: the studies' length x depth grid."""
        return self.keep_split(lambda rng: self.fitted(rng, family, length, depth, split), seed, index, split)

    def fitted(self, rng: np.random.Generator, family: int, length: int, depth: float, split: str) -> Example:
        task, sub = self.families[family], int(rng.integers(2**62))

        def render(units: int) -> Example:  # one plan per example: the same draws whatever the units
            return task.render(np.random.default_rng(sub), units, depth)

        units = fit_units(lambda u: len(render(u).tokens_T), length)
        ex = render(units)
        if len(ex.tokens_T) > self.max_tokens(split):
            raise ConfigError(f"task `{self.name}`: a `{task.name}` example with no units has {len(ex.tokens_T)} "
                              f"tokens, more than the {split} split's longest length {self.max_tokens(split)}; "
                              f"shrink the family's options (fewer keys, values, digits) or raise the range")
        pad = max(0, length - len(ex.tokens_T))
        return text_example(" " * pad + ex.prompt, ex.answer,
                            {**ex.info, "family": task.name, "length": len(ex.tokens_T) + pad, "pad": pad})


def fit_units(size, length: int) -> int:
    """The largest unit count u whose example fits (`size(u) <= length`) with `size(u + 1) > length`, found from an
    estimate of bytes per unit and then stepped; 0 when even no units do not fit."""
    empty = size(0)
    if empty >= length:
        return 0
    per_unit = max(1.0, (size(PROBE_UNITS) - empty) / PROBE_UNITS)
    u = max(0, int((length - empty) / per_unit))
    while u > 0 and size(u) > length:
        u -= 1
    while size(u + 1) <= length:
        u += 1
    return u
