"""Train / validation / filler shard ranges over a source's file indices, checked disjoint.

A source numbers its files 0..N-1 (hub shard number, or position in the sorted local file list).
Each split takes a half-open range [start, stop); stop = None runs to the end of the source. The
ranges must not overlap: validation or filler text (the haystack of passkey/needle evals) that
also appears in training would make those numbers meaningless. `filler` may be empty (start == stop).
Disjoint indices are not enough when one file sits at two indices (listed twice, or copied): the files of
different splits are also checked by content (`check_disjoint_content`, sha256 of the files whose sizes
collide), and two with equal bytes are refused, naming both.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from posbench.config_loader import Checked
from posbench.errors import ConfigError, DataError

SPLITS = ("train", "val", "filler")


@dataclass
class SplitRange(Checked):
    start: int = 0
    stop: int | None = None  # exclusive; None = to the last file of the source

    def check(self) -> None:
        if self.start < 0 or (self.stop is not None and self.stop < self.start):
            raise ConfigError(f"split range [{self.start}, {self.stop}) is invalid: need 0 <= start <= stop")

    def __contains__(self, index: int) -> bool:
        return self.start <= index and (self.stop is None or index < self.stop)

    def is_empty(self) -> bool:
        return self.stop is not None and self.stop == self.start

    def __str__(self) -> str:
        return f"[{self.start}, {'end' if self.stop is None else self.stop})"


@dataclass
class SplitsConfig(Checked):
    val: SplitRange = field(default_factory=lambda: SplitRange(0, 1))
    filler: SplitRange = field(default_factory=lambda: SplitRange(1, 2))
    train: SplitRange = field(default_factory=lambda: SplitRange(2, None))

    def check(self) -> None:
        for name in ("train", "val"):
            if self.ranges()[name].is_empty():
                raise ConfigError(f"data.splits.{name} is empty; give it at least one shard (stop > start)")
        items = [(n, r) for n, r in self.ranges().items() if not r.is_empty()]
        for i, (a, ra) in enumerate(items):
            for b, rb in items[i + 1:]:
                lo = max(ra.start, rb.start)
                hi = min(x for x in (ra.stop, rb.stop, float("inf")) if x is not None)
                if lo < hi:
                    raise ConfigError(
                        f"data.splits.{a} {ra} and data.splits.{b} {rb} overlap (shard {lo} is in both); "
                        "the train, val and filler ranges must be disjoint, e.g. val [0, 1), filler [1, 2), "
                        "train [2, end)")

    def ranges(self) -> dict[str, SplitRange]:
        return {name: getattr(self, name) for name in SPLITS}

    def split_of(self, index: int) -> str | None:
        for name, rng in self.ranges().items():
            if index in rng:
                return name
        return None

    def check_count(self, count: int, source: str) -> None:
        """Fail if a non-empty range starts past the source's last file, or ends past it."""
        for name, rng in self.ranges().items():
            if rng.is_empty():
                continue
            if rng.start >= count or (rng.stop is not None and rng.stop > count):
                raise ConfigError(f"data.splits.{name} {rng} goes past the {count} files of {source} "
                                  f"(indices 0..{count - 1}); shrink the range")


def check_disjoint_content(files: Iterable[tuple[str, str, int | None, Callable[[], str | None]]]) -> None:
    """Refuse (DataError naming both) two files of different splits with the same content. `files`: (split,
    name, size in bytes or None when unknown, a function giving its sha256 or None when unknown). Only files
    whose size equals that of a file in another split are hashed, so the check costs nothing on a normal corpus."""
    by_size: dict[int, list[tuple[str, str, Callable[[], str | None]]]] = defaultdict(list)
    for split, name, size, sha in files:
        if size is not None:
            by_size[size].append((split, name, sha))
    for group in by_size.values():
        if len({split for split, _, _ in group}) < 2:
            continue
        seen: dict[str, tuple[str, str]] = {}
        for split, name, sha in sorted(group, key=lambda item: item[1]):
            digest = sha()
            if digest is None:
                continue
            other = seen.setdefault(digest, (split, name))
            if other[0] != split:
                raise DataError(f"{other[1]} ({other[0]} split) and {name} ({split} split) have the same content "
                                f"(sha256 {digest[:16]}...): its text would be in both splits. Remove the duplicate "
                                "from the source, or change data.splits so both are in one split")
