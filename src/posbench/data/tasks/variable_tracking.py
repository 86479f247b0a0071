"""variable_tracking: follow chains of variable assignments through filler text (Hsieh et al. 2024, arXiv
2404.06654, section 3.1 "Multi-hop Tracing": `VAR X1 = 12345`, then `VAR X2 = VAR X1`, ... `num_hops` times;
find every variable that holds the value).

    text  ... VAR QZK = 48213. ... VAR BMT = VAR QZK. ... VAR LPA = VAR BMT. ...
          "Which variables equal 48213? They are" + " QZK BMT LPA"

`n_chains` chains, each `n_hops` + 1 variables with its own value: the first is asked, the others are
distractors (RULER's num_chains). Variable names are `name_letters` random capitals (RULER: 5), values
`value_digits`-digit numbers (RULER: 5). Every statement sits at a uniformly random point of the filler
(units: filler words), a chain's statements in its order, so the family has no depth axis. The answer names
the asked chain's variables in assignment order. RULER's default is one chain of 4 hops; the default here is
2 hops with 3-letter names, so a chain fits a 128-token model's context. `prompt: full` is RULER's wording
("Memorize and track the chain(s) of variable assignment hidden in the following text." ... "Question: Find
all variables that are assigned the value 48213 in the text above. Answer: According to the chain(s) of
variable assignment in the text above, 3 variables are assigned the value 48213, they are:").
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Literal

import numpy as np

from posbench.data.tasks.long_context import (
    LongContextTask,
    distinct_numbers,
    interleave,
    longest_word_bytes,
    spread,
    text_example,
)
from posbench.data.tasks.task import TASKS, Example, require


@TASKS.register("variable_tracking")
class VariableTracking(LongContextTask):
    summary = "RULER variable tracking: name every variable a chain of assignments gives one value"
    uses_filler = True
    depth_controlled = False

    @dataclass
    class Config(LongContextTask.Config):
        n_hops: int = 2  # assignments after the first: a chain has n_hops + 1 variables
        n_chains: int = 1  # the first is asked
        name_letters: int = 3
        value_digits: int = 5
        prompt: Literal["full", "short"] = "short"

        def check(self) -> None:
            super().check()
            require(1 <= self.n_hops <= 16 and 1 <= self.n_chains <= 8,
                    f"task `{self.name}`: n_hops={self.n_hops} must be in [1, 16] and n_chains={self.n_chains} "
                    "in [1, 8]")
            require(2 <= self.name_letters <= 8 and 1 <= self.value_digits <= 18,
                    f"task `{self.name}`: name_letters={self.name_letters} must be in [2, 8] and value_digits="
                    f"{self.value_digits} in [1, 18]")

    def names(self, rng: np.random.Generator, n: int) -> list[str]:
        out: list[str] = []
        while len(out) < n:
            name = "".join(string.ascii_uppercase[i] for i in rng.integers(26, size=self.cfg.name_letters))
            if name not in out and name != "VAR":
                out.append(name)
        return out

    def render(self, rng: np.random.Generator, units: int, depth: float) -> Example:
        c = self.cfg
        per_chain = c.n_hops + 1
        names = self.names(rng, c.n_chains * per_chain)
        values = distinct_numbers(rng, c.n_chains, c.value_digits)
        chains = [names[i * per_chain:(i + 1) * per_chain] for i in range(c.n_chains)]
        items = []
        for chain, value in zip(chains, values, strict=True):
            statements = [f"VAR {chain[0]} = {value}."] + [f"VAR {b} = VAR {a}." for a, b in zip(chain, chain[1:])]
            items += [(p, s, len(items) + j) for j, (p, s) in enumerate(zip(spread(rng, per_chain, units), statements))]
        # by point; at a shared point chains keep their own order (statement index breaks ties)
        items.sort(key=lambda it: (it[0], it[2]))
        words = self.filler.words(rng, units)
        text = interleave(words, [(p, s) for p, s, _ in items])
        value, asked = values[0], chains[0]
        if c.prompt == "short":
            intro, question = "", f"Which variables equal {value}? They are"
        else:
            intro = "Memorize and track the chain(s) of variable assignment hidden in the following text. "
            question = (f"Question: Find all variables that are assigned the value {value} in the text above. "
                        f"Answer: According to the chain(s) of variable assignment in the text above, {per_chain} "
                        f"variables are assigned the value {value}, they are:")
        info = {"units": units, "chains": chains, "values": values,
                "chance": float(26 ** c.name_letters) ** -per_chain, "guess": 1 / c.n_chains}
        return text_example(intro + text + " " + question, " " + " ".join(asked), info)

    def fixed_bytes(self) -> int:
        c = self.cfg
        statement = 2 * c.name_letters + c.value_digits + 16
        return 320 + c.n_chains * (c.n_hops + 1) * statement + (c.n_hops + 1) * (c.name_letters + 1)

    def unit_bytes(self) -> int:
        return longest_word_bytes(self.filler)
