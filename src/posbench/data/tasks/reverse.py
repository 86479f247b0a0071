"""reverse: a string of letters, then the same letters backwards. ID 3-8 letters, OOD 9-16.

    tokens  a b c <sep> c b a <end>      text  "Reverse the letters: a b c ->" + " c b a"
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from posbench.data.tasks.task import TASKS
from posbench.data.tasks.transform import SequenceTransform, TransformConfig


@TASKS.register("reverse")
class Reverse(SequenceTransform):
    summary = "reverse a string of letters"
    instruction = "Reverse the"
    noun = "letters"

    @dataclass
    class Config(TransformConfig):
        id_range: tuple[int, int] = (3, 8)  # letters
        ood_range: tuple[int, int] = (9, 16)

    def symbols(self) -> list[str]:
        return list(string.ascii_lowercase[: self.cfg.n_symbols])

    def transform(self, xs: list[str]) -> list[str]:
        return xs[::-1]
