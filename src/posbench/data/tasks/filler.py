"""Filler text for the long-context tasks (passkey, needle): the haystack around the fact to find.

A filler only hands out `n` words from an RNG; the task decides where the fact goes, so one example plan
renders with any filler and distances are exact word counts. Kinds:
  GeneratedFiller  random plain sentences from small word lists: deterministic, needs no files
  TextFiller       the user's own text, e.g. documents decoded from the corpus's filler shards (kept out
                   of training by data/splits.py): `n` consecutive words from a random offset, wrapping
  garden_filler()  the classic passkey haystack, "The grass is green. The sky is blue. ..." repeated
                   (Mohtashami & Jaggi 2023, "Landmark Attention", appendix on passkey retrieval)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Protocol

import numpy as np

from posbench.errors import ConfigError


class Filler(Protocol):
    fingerprint: str

    def words(self, rng: np.random.Generator, n: int) -> list[str]:
        """Exactly n words (no digits, so numbers hidden in the haystack stay unambiguous)."""


_DET = ["The", "A", "Every", "That", "One"]
_ADJ = ["quiet", "old", "green", "small", "bright", "heavy", "narrow", "warm", "distant", "plain"]
_NOUN = ["river", "garden", "window", "road", "teacher", "village", "letter", "mountain", "kitchen", "boat",
         "forest", "market", "bridge", "cloud", "table", "lantern"]
_VERB = ["follows", "watches", "crosses", "finds", "passes", "holds", "covers", "meets", "leaves", "reaches"]


class GeneratedFiller:
    """Sentences "Det adj noun verb the noun." with every word drawn from the RNG."""

    fingerprint = "generated-v1"

    def words(self, rng: np.random.Generator, n: int) -> list[str]:
        if n <= 0:
            return []
        k = n // 6 + 1  # six words per sentence
        det, adj, noun, verb, obj = (rng.integers(len(x), size=k) for x in (_DET, _ADJ, _NOUN, _VERB, _NOUN))
        out: list[str] = []
        for i in range(k):
            out += [_DET[det[i]], _ADJ[adj[i]], _NOUN[noun[i]], _VERB[verb[i]], "the", _NOUN[obj[i]] + "."]
        return out[:n]


class TextFiller:
    """Consecutive words of the given text(s), starting at an RNG-drawn offset and wrapping around."""

    def __init__(self, texts: str | Iterable[str]):
        texts = [texts] if isinstance(texts, str) else list(texts)
        self._words = [w for t in texts for w in t.split()]
        if not self._words:
            raise ConfigError("filler text is empty: give at least one non-blank document")
        digest = hashlib.sha256("\n".join(" ".join(t.split()) for t in texts).encode()).hexdigest()[:16]
        self.fingerprint = f"text-{digest}"

    def words(self, rng: np.random.Generator, n: int) -> list[str]:
        if n <= 0:
            return []
        size = len(self._words)
        start = int(rng.integers(size))
        return [self._words[(start + i) % size] for i in range(n)]


GARDEN = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."


def garden_filler() -> TextFiller:
    return TextFiller(GARDEN)


def sentence_start(words: list[str], i: int, lookback: int = 50) -> int:
    """The nearest j <= i where a sentence starts (j == 0 or words[j-1] ends with . ! ?), or i itself when
    none is within `lookback` words. Text renderings put the fact and the question between sentences
    rather than inside one ("The sky is What is the pass key?"), moving them by at most a sentence."""
    for j in range(i, max(0, i - lookback) - 1, -1):
        if j == 0 or words[j - 1][-1] in ".!?":
            return j
    return i


def cut_points(words: list[str], fact_at: int, end: int) -> tuple[int, int]:
    """Sentence-aligned (fact position, filler end) for word positions (fact_at, end), fact_at <= end; the
    filler after the fact is dropped when no sentence ends in it."""
    a = sentence_start(words, fact_at)
    return a, max(a, sentence_start(words, end))
