"""simple_copy: a string of letters, then the same letters again. ID 4-12 letters, OOD 13-20.

    tokens  a b c <sep> a b c <end>      text  "Copy the letters: a b c ->" + " a b c"
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from posbench.data.tasks.task import TASKS
from posbench.data.tasks.transform import SequenceTransform, TransformConfig


@TASKS.register("simple_copy")
class SimpleCopy(SequenceTransform):
    summary = "copy a string of letters"
    instruction = "Copy the"
    noun = "letters"

    @dataclass
    class Config(TransformConfig):
        id_range: tuple[int, int] = (4, 12)  # letters
        ood_range: tuple[int, int] = (13, 20)

    def symbols(self) -> list[str]:
        return list(string.ascii_lowercase[: self.cfg.n_symbols])

    def transform(self, xs: list[str]) -> list[str]:
        return list(xs)
