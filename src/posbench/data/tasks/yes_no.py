"""Base of the yes/no labelling tasks (k_back, long_range_match, shift_invariant): items are the first
`cfg.n_symbols` letters, one token each; labels are the <yes>/<no> tokens, drawn ~50% positive by
construction, so chance is 0.5 for every length."""

from __future__ import annotations

import string
from dataclasses import dataclass

from posbench.data.tasks.task import Task, TaskConfig, Vocab, require

YES, NO = "<yes>", "<no>"


@dataclass
class YesNoConfig(TaskConfig):
    """Lengths in items; subclasses declare `n_symbols` (its default differs per task)."""

    id_range: tuple[int, int] = (8, 16)  # items
    ood_range: tuple[int, int] = (17, 32)

    def check(self) -> None:
        super().check()
        require(2 <= self.n_symbols <= 26, f"task `{self.name}`: n_symbols={self.n_symbols} must be in [2, 26]")


class YesNoTask(Task):
    Config = YesNoConfig
    binary = True

    def build_vocab(self) -> Vocab:
        return Vocab(string.ascii_lowercase[: self.cfg.n_symbols], [YES, NO])

    def max_tokens(self, split: str) -> int:
        return self.cfg.split_range(split)[1]  # one token per item

    @property
    def chance_accuracy(self) -> float:
        return 0.5

    def label_id(self, yes: bool) -> int:
        return self.vocab.id(YES if yes else NO)
