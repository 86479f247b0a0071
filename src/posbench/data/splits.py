"""Train / validation / filler shard ranges over a source's file indices, checked disjoint.

A source numbers its files 0..N-1 (hub shard number, or position in the sorted local file list).
Each split takes a half-open range [start, stop); stop = None runs to the end of the source. The
ranges must not overlap: validation or filler text (the haystack of passkey/needle evals) that
also appears in training would make those numbers meaningless. `filler` may be empty (start == stop).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from posbench.config_loader import ConfigError

SPLITS = ("train", "val", "filler")


@dataclass
class SplitRange:
    start: int = 0
    stop: int | None = None  # exclusive; None = to the last file of the source

    def __post_init__(self):
        if self.start < 0 or (self.stop is not None and self.stop < self.start):
            raise ConfigError(f"split range [{self.start}, {self.stop}) is invalid: need 0 <= start <= stop")

    def __contains__(self, index: int) -> bool:
        return self.start <= index and (self.stop is None or index < self.stop)

    def is_empty(self) -> bool:
        return self.stop is not None and self.stop == self.start

    def __str__(self) -> str:
        return f"[{self.start}, {'end' if self.stop is None else self.stop})"


@dataclass
class SplitsConfig:
    val: SplitRange = field(default_factory=lambda: SplitRange(0, 1))
    filler: SplitRange = field(default_factory=lambda: SplitRange(1, 2))
    train: SplitRange = field(default_factory=lambda: SplitRange(2, None))

    def __post_init__(self):
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
