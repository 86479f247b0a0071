"""template: a fixed-shape frame whose slots give the same values different roles by position.

    tokens   <start> a0 a1 .. a_{n-1} <mid> a_n .. a_{n+m-1} <end> <fill> .. <fill>
    targets  next token from <mid> on: the continuation, <end>, then every <fill> up to the frame length
    text     "Continue the progression mod 64: [ 3 5 7 |" + " 9 11 13 15 ] . . ."

a_i = (a0 + i * step) mod `modulus`: the same value tokens are given before <mid> and must be produced
after it (and wrap around), so only the position relative to the markers says what a value is for. The
frame is padded with <fill> to one length per split (1 + max terms + 1 + continuation + 1), so the model
must also learn where the frame ends. OOD = longer given progressions (defaults: ID 3-8 terms, OOD 9-16).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posbench.data.tasks.task import TASKS, Example, Task, TaskConfig, Vocab, answer_rows, require, uniform_int

START, MID, END, FILL = "<start>", "<mid>", "<end>", "<fill>"
_TEXT = {START: "[", MID: "|", END: "]", FILL: "."}


@TASKS.register("template")
class Template(Task):
    summary = "continue an arithmetic progression inside a fixed marker/padding frame"

    @dataclass
    class Config(TaskConfig):
        id_range: tuple[int, int] = (3, 8)  # given terms
        ood_range: tuple[int, int] = (9, 16)
        continuation: int = 4  # terms to produce after <mid>
        modulus: int = 64  # values 0..modulus-1 (64 x 63 progressions per length)

        def check(self) -> None:
            super().check()
            require(self.id_range[0] >= 2, f"task `{self.name}`: id_range must start at >= 2 terms (a step "
                                           f"needs two terms to be seen)")
            require(self.continuation >= 1, f"task `{self.name}`: continuation={self.continuation} must be >= 1")
            require(3 <= self.modulus <= 1000, f"task `{self.name}`: modulus={self.modulus} must be in [3, 1000]")

    def build_vocab(self) -> Vocab:
        return Vocab([str(v) for v in range(self.cfg.modulus)], [START, MID, END, FILL])

    def max_tokens(self, split: str) -> int:
        return 1 + self.cfg.split_range(split)[1] + 1 + self.cfg.continuation + 1

    @property
    def chance_accuracy(self) -> float:
        return 1 / self.cfg.modulus

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        n, m, mod = uniform_int(rng, self.cfg.split_range(split)), self.cfg.continuation, self.cfg.modulus
        a0, step = int(rng.integers(mod)), 1 + int(rng.integers(mod - 1))  # step 0 would be a constant
        terms = [str((a0 + i * step) % mod) for i in range(n + m)]
        given = [START] + terms[:n] + [MID]
        answer = terms[n:] + [END]
        answer += [FILL] * (self.max_tokens(split) - len(given) - len(answer))
        tokens, targets = answer_rows(self.vocab.ids(given), self.vocab.ids(answer))
        text = [_TEXT.get(s, s) for s in given + answer]
        prompt = f"Continue the progression mod {mod}: " + " ".join(text[: len(given)])
        return Example(prompt, " " + " ".join(text[len(given):]), tokens, targets,
                       {"length": n, "start": a0, "step": step})
