"""kv_retrieval: the value of one key among many key-value pairs, the relevant pair's position controlled
(Liu et al. 2023, "Lost in the Middle: How Language Models Use Long Contexts", arXiv 2307.03172, section 3:
a JSON object of UUID pairs, accuracy by the relevant pair's position).

    text  '{"a3f9": "0b7c", "51de": "9e02", ...} Key: "51de" Value:' + ' "9e02"'

Units are distractor pairs: `units` + 1 pairs, the relevant one at index round(depth x units), every key and
value a distinct `key_chars`-character hex string (Liu et al.: 36-character UUIDs, `key_chars: 36` writes
UUID-shaped 8-4-4-4-12 strings). `prompt: full` adds Liu et al.'s instruction ("Extract the value
corresponding to the specified key in the JSON object below." ... "JSON data:" ... "Key: ..."
"Corresponding value:"). The question-blind baseline is 1 / (units + 1), a random pair's value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

import numpy as np

from posbench.data.tasks.long_context import LongContextTask, text_example
from posbench.data.tasks.task import TASKS, Example, require

HEX = "0123456789abcdef"
UUID_GROUPS = (8, 4, 4, 4, 12)


@TASKS.register("kv_retrieval")
class KeyValueRetrieval(LongContextTask):
    summary = "lost in the middle: one key's value among many key-value pairs, the pair's position controlled"

    @dataclass
    class Config(LongContextTask.Config):
        key_chars: int = 4
        prompt: Literal["full", "short"] = "short"

        def check(self) -> None:
            super().check()
            require(3 <= self.key_chars <= 12 or self.key_chars == 36,
                    f"task `{self.name}`: key_chars={self.key_chars} must be in [3, 12], or 36 (UUIDs)")

    def string(self, rng: np.random.Generator) -> str:
        n = 32 if self.cfg.key_chars == 36 else self.cfg.key_chars
        s = "".join(HEX[i] for i in rng.integers(16, size=n))
        if self.cfg.key_chars != 36:
            return s
        cuts = np.cumsum((0,) + UUID_GROUPS)
        return "-".join(s[a:b] for a, b in zip(cuts, cuts[1:]))

    def render(self, rng: np.random.Generator, units: int, depth: float) -> Example:
        seen: dict[str, None] = {}  # distinct strings, in the order drawn
        while len(seen) < 2 * (units + 1):
            seen.setdefault(self.string(rng))
        seen = list(seen)
        pairs = list(zip(seen[::2], seen[1::2]))
        at = round(depth * units)
        key, value = pairs[at]
        body = "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs) + "}"
        if self.cfg.prompt == "short":
            prompt = f"{body} Key: {json.dumps(key)} Value:"
        else:
            prompt = ("Extract the value corresponding to the specified key in the JSON object below. JSON data: "
                      f"{body} Key: {json.dumps(key)} Corresponding value:")
        n = 32 if self.cfg.key_chars == 36 else self.cfg.key_chars
        info = {"units": units, "depth": at / max(1, units), "index": at, "pairs": len(pairs),
                "chance": 16.0**-n, "guess": 1 / len(pairs)}
        return text_example(prompt, " " + json.dumps(value), info)

    def fixed_bytes(self) -> int:
        return 160 + 3 * (self.cfg.key_chars + 6)

    def unit_bytes(self) -> int:
        return 2 * (self.cfg.key_chars + 2) + 4
