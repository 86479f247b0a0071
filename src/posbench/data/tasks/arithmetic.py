"""Multi-digit arithmetic in the formats the length-generalization papers train on, and the per-token position
ids those papers give each digit (`Example.positions_T`, design rule: position is data).

    reverse=all (default)   3 2 1 + 5 4 = 8 6 1 <end>       123 + 45 = 168, every number least significant first
    reverse=answer          1 2 3 + 4 5 = 8 6 1 <end>       the result only (Cho et al. 2024)
    reverse=none            1 2 3 + 4 5 = 1 6 8 <end>       as written
    index_hints=true        a 3 b 2 c 1 + a 5 b 4 = a 8 b 6 c 1 <end>   (with reverse=all; Zhou et al. 2023)
    pad=true                1 2 3 + 0 4 5 = 8 6 1 0 <end>   (with reverse=answer: the format of Cho et al. 2024)

pad=true writes both operands with the longer one's digit count and the result with the most digits such operands
can give (`result_digits`: one more for addition, the carry place), zeros in front, as position coupling's authors
do (HanseulJo/position-coupling, src/data/addition.py, `AdditionDataset`: operands padded to `max_len`, the label
to `max_len + 1`, pad token '0'). Every padded zero is a digit with its place, so equal places line up across the
operands and the result, and the result's last place (the carry) is a place no operand has.

Place ids: every digit gets its place in its own number, 1 for the least significant (the Abacus index of
McLeish et al. 2024, and the id position coupling (Cho et al. 2024) shares between digits of equal significance);
an index hint gets the place of the digit it marks; operators, `<end>` and padding get 0. Which PE reads them and
how is the PE's business (pe/abacus.py, pe/coupled.py); PEs that ignore data ids keep their own positions.

Generation: the ids of answer tokens must be known as they are generated. With the result written least
significant first, an answer token's place is the count of answer digits before it, plus one
(`answer_positions`); written most significant first, a digit's place depends on the answer's length, which is
unknown until it ends, so `reverse=none` examples carry no ids (every PE then uses its own positions).

Operand digit counts are drawn independently and uniformly from the split's range (`id_range`, `ood_range`:
digits per operand, no leading zeros); `info["digits"]` is the longer operand's count, the bin of the study's
accuracy-per-length plots.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Literal

import numpy as np

from posbench.data.tasks.task import Example, Task, TaskConfig, Vocab, answer_rows, require, uniform_int

DIGITS = [str(d) for d in range(10)]
EQ, END = "=", "<end>"
HINTS = list(string.ascii_lowercase + string.ascii_uppercase)  # index-hint symbols: place 1 = "a", ...


@dataclass
class ArithmeticConfig(TaskConfig):
    id_range: tuple[int, int] = (1, 5)  # digits per operand
    ood_range: tuple[int, int] = (6, 20)
    reverse: Literal["all", "answer", "none"] = "all"  # which numbers are written least significant digit first
    index_hints: bool = False  # each digit preceded by the symbol of its place (Zhou et al. 2023)
    pad: bool = False  # zero-pad the operands to equal length and the result to its longest (Cho et al. 2024)

    def check(self) -> None:
        super().check()
        require(self.ood_range[1] <= 100, f"task `{self.name}`: ood_range={list(self.ood_range)} must end at "
                                          "<= 100 digits per operand")


class ArithmeticTask(Task):
    """Two operands, one operator; subclasses say which (`op`, `apply`, `result_digits`)."""

    op = "+"
    length_bin = "digits"  # studies report exact match per operand digit count

    def apply(self, a: int, b: int) -> int:
        raise NotImplementedError

    def result_digits(self, n_a: int, n_b: int) -> int:
        """The most digits a result of operands with these digit counts can have."""
        raise NotImplementedError

    def build_vocab(self) -> Vocab:
        hints = []
        if self.cfg.index_hints:
            places = self.result_digits(self.cfg.ood_range[1], self.cfg.ood_range[1])
            require(places <= len(HINTS), f"task `{self.name}`: index_hints name at most {len(HINTS)} places, but "
                                          f"ood_range={list(self.cfg.ood_range)} makes results of up to {places} "
                                          "digits; lower ood_range or turn index_hints off")
            hints = HINTS[:places]
        return Vocab(DIGITS, [self.op, EQ, END], hints)

    def max_tokens(self, split: str) -> int:
        n = self.cfg.split_range(split)[1]
        per_digit = 2 if self.cfg.index_hints else 1
        return per_digit * (2 * n + self.result_digits(n, n)) + 3

    @property
    def chance_accuracy(self) -> float:
        return 1 / 10

    def operand(self, rng: np.random.Generator, n: int) -> int:
        """n uniform digits, the leading one nonzero when n > 1 (digit by digit: 10**n overflows int64)."""
        lead = int(rng.integers(1 if n > 1 else 0, 10))
        rest = rng.integers(0, 10, size=n - 1)
        return int(str(lead) + "".join(map(str, rest)))

    def number(self, x: int, reverse: bool, width: int = 0) -> tuple[list[str], list[int]]:
        """A number's symbols as written, and each symbol's place id (1 = least significant digit); `width`:
        at least this many digits, zeros in front (pad=true)."""
        digits = str(x).zfill(width)[::-1]  # least significant first
        syms, places = [], []
        for i, d in enumerate(digits):
            syms += [HINTS[i], d] if self.cfg.index_hints else [d]
            places += [i + 1] * (2 if self.cfg.index_hints else 1)
        if not reverse:  # written as usual: reverse the (hint, digit) pairs, keeping each hint before its digit
            step = 2 if self.cfg.index_hints else 1
            pairs = [syms[i:i + step] for i in range(0, len(syms), step)][::-1]
            syms = [s for p in pairs for s in p]
            places = places[::-1]
        return syms, places

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        r = self.cfg.split_range(split)
        n_a, n_b = uniform_int(rng, r), uniform_int(rng, r)
        return self.render(self.operand(rng, n_a), self.operand(rng, n_b))

    def render(self, a: int, b: int) -> Example:
        """The example `a op b` in this task's format, with its place ids."""
        n_a, n_b = len(str(a)), len(str(b))
        c = self.apply(a, b)
        rev_ops = self.cfg.reverse == "all"
        width = max(n_a, n_b) if self.cfg.pad else 0
        a_syms, a_places = self.number(a, rev_ops, width)
        b_syms, b_places = self.number(b, rev_ops, width)
        c_syms, c_places = self.number(c, self.cfg.reverse != "none", self.result_digits(width, width) if width else 0)
        prompt = a_syms + [self.op] + b_syms + [EQ]
        answer = c_syms + [END]
        tokens, targets = answer_rows(self.vocab.ids(prompt), self.vocab.ids(answer))
        positions = None
        if self.cfg.reverse != "none":
            positions = np.asarray(a_places + [0] + b_places + [0] + self.answer_positions(self.vocab.ids(answer)),
                                   dtype=np.int64)
        return Example("".join(prompt), " " + "".join(c_syms), tokens, targets,
                       {"digits": max(n_a, n_b), "operands": [n_a, n_b]}, positions)

    @property
    def defines_positions(self) -> bool:
        return self.cfg.reverse != "none"

    def text_positions(self, ex: Example) -> np.ndarray | None:
        """Per character of `prompt + answer`: every symbol of the text is one character (a digit, the operator,
        "=", a hint letter), so the prompt's characters take the prompt tokens' ids; the answer is " " then the
        result's symbols: the space (no token of its own) gets 0, what non-digits get, and the token form's
        trailing `<end>` has no character."""
        if ex.positions_T is None:
            return None
        n_prompt, n_result = len(ex.prompt), len(ex.answer) - 1
        pos = np.concatenate([ex.positions_T[:n_prompt], [0], ex.positions_T[n_prompt:n_prompt + n_result]])
        if len(pos) != len(ex.text):
            raise AssertionError(f"task `{self.name}`: {len(pos)} text ids for {len(ex.text)} characters")
        return pos.astype(np.int64)

    def answer_positions(self, answer_ids: list[int]) -> list[int] | None:
        """The place id of each answer token, from the answer tokens up to it (what a decoder has generated):
        a digit's place is one more than the digits before it, a hint shares its digit's place, anything else
        (`<end>`) is 0. None with reverse=none: the places are unknown until the answer ends."""
        if self.cfg.reverse == "none":
            return None
        out, seen = [], 0
        for i in answer_ids:
            sym = self.vocab.symbols[int(i)]
            if sym in DIGITS:
                seen += 1
                out.append(seen)
            else:
                out.append(seen + 1 if sym in HINTS else 0)
        return out
