"""pig_latin: a word -> Pig Latin, letter by letter. OOD = longer words (defaults: ID 3-6 letters, OOD
7-12; hyphens not counted). Words are made up (`words: generated`, the default) or real English words
(`words: dictionary`: the lower-case a-z entries of a word list, Debian's `wamerican` at
/usr/share/dict/words by default; a missing list falls back to generated words, said in `data_note`).

    tokens  s t r o n g <sep> o n g s t r a y <end>        text  "Pig Latin: strong ->" + " ongstray"

Rules: a word starting with a vowel gets "way" (apple -> appleway); otherwise its leading consonant
cluster moves to the end and gets "ay" (strong -> ongstray). "y" is a consonant only as the first letter
(rhythm -> ythmrhay), "qu" moves as one (queen -> eenquay), a word without vowels just gets "ay".
Hyphenated words convert each part (well-known -> ellway-ownknay). Words are drawn as an onset cluster
followed by alternating vowels and consonants, hyphenated with probability `hyphen_prob`; dictionary
words are drawn uniformly among the list's words of the split's lengths (a hyphenated one joins two).

Source/target form (the encoder-decoder, model/encdec.py): rows are `word <sep> answer <end>`, so
`<sep>` ends the source (`source_end_token`); the decoder-only model reads the same rows.
"""

from __future__ import annotations

import functools
import hashlib
import re
import string
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from posbench.data.tasks.task import TASKS, Example, Task, TaskConfig, Vocab, answer_rows, require, uniform_int

VOWELS, CONSONANTS = "aeiou", "bcdfghjklmnprstvwz"
ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y",
          "z", "bl", "br", "ch", "cl", "cr", "dr", "fl", "fr", "gl", "gr", "pl", "pr", "qu", "sh", "sk", "sl", "sm",
          "sn", "sp", "st", "sw", "th", "tr", "tw", "wh", "wr", "rh", "str", "spr", "thr", "squ", "sch"]
SEP, END, HYPHEN = "<sep>", "<end>", "-"
DEFAULT_WORD_LIST = "/usr/share/dict/words"  # Debian/Ubuntu package `wamerican`, a system path


@functools.lru_cache(maxsize=4)
def read_word_list(path: str) -> tuple[dict[int, list[str]], str] | None:
    """{length: sorted words} of the list's lower-case a-z entries and the file's sha256 (first 12 hex),
    or None when the file does not exist."""
    file = Path(path)
    if not file.is_file():
        return None
    raw = file.read_bytes()
    words = sorted({w for w in raw.decode("utf-8", errors="replace").split() if re.fullmatch("[a-z]+", w)})
    by_length: dict[int, list[str]] = {}
    for w in words:
        by_length.setdefault(len(w), []).append(w)
    return by_length, hashlib.sha256(raw).hexdigest()[:12]


def to_pig_latin(word: str) -> str:
    if HYPHEN in word:
        return HYPHEN.join(to_pig_latin(part) for part in word.split(HYPHEN))
    i = 0
    while i < len(word) and not (word[i] in VOWELS or (word[i] == "y" and i > 0)):
        i += 2 if word[i:i + 2] == "qu" else 1
    return word + "way" if i == 0 else word[i:] + word[:i] + "ay"


@TASKS.register("pig_latin")
class PigLatin(Task):
    summary = "translate a made-up word into Pig Latin"

    @dataclass
    class Config(TaskConfig):
        id_range: tuple[int, int] = (3, 6)  # letters, hyphens not counted
        ood_range: tuple[int, int] = (7, 12)
        hyphen_prob: float = 0.2  # chance of a two-part hyphenated word (needs >= 4 letters)
        words: Literal["generated", "dictionary"] = "generated"
        word_list: str = DEFAULT_WORD_LIST  # with words=dictionary: one word per line (or whitespace)

        def check(self) -> None:
            super().check()
            require(0.0 <= self.hyphen_prob <= 1.0,
                    f"task `{self.name}`: hyphen_prob={self.hyphen_prob} must be in [0, 1]")
            require(self.id_range[0] >= 2, f"task `{self.name}`: id_range must start at >= 2 letters")

    def __init__(self, cfg, filler=None):
        super().__init__(cfg, filler)
        self.dictionary, self.data_note = None, "made-up words"
        if cfg.words == "dictionary":
            loaded = read_word_list(cfg.word_list)
            if loaded is None:
                self.data_note = (f"made-up words: word list {cfg.word_list} not found "
                                  f"(Debian: apt-get install wamerican)")
                warnings.warn(f"pig_latin: {self.data_note}; using generated words", stacklevel=2)
            else:
                self.dictionary, digest = loaded
                for split in ("train", "ood"):
                    low, high = cfg.split_range(split)
                    require(any(self.dictionary.get(n) for n in range(low, high + 1)),
                            f"task `{self.name}`: the word list {cfg.word_list} has no words of {low}-{high} letters")
                self.data_note = f"dictionary words from {cfg.word_list} (sha256 {digest})"

    @property
    def fingerprint(self) -> str:
        """With words=dictionary, the config's fingerprint plus the words actually used (list and version,
        or the fallback): a new word list version must not reuse cached rows."""
        if self.cfg.words == "generated":
            return super().fingerprint
        return hashlib.sha256(f"{super().fingerprint}|{self.data_note}".encode()).hexdigest()[:16]

    def build_vocab(self) -> Vocab:
        return Vocab(string.ascii_lowercase, [HYPHEN, SEP, END])

    @property
    def source_end_token(self) -> int:
        return self.vocab.id(SEP)

    def max_tokens(self, split: str) -> int:
        n = self.cfg.split_range(split)[1] + 1  # letters + one hyphen
        return n + 1 + n + 2 * len("way") + 1

    @property
    def chance_accuracy(self) -> float:
        return 1 / 26

    def part(self, rng: np.random.Generator, n: int) -> str:
        """n letters: no onset (a quarter of the time) or an onset cluster shorter than n, then alternating
        vowel, consonant, vowel, ..."""
        onsets = [o for o in ONSETS if len(o) < n]
        word = "" if rng.random() < 0.25 else onsets[int(rng.integers(len(onsets)))]
        for j in range(n - len(word)):
            pool = VOWELS if j % 2 == 0 else CONSONANTS
            word += pool[int(rng.integers(len(pool)))]
        return word

    def real_word(self, rng: np.random.Generator, lengths: range) -> str:
        """A word drawn uniformly among the list's words with a length in `lengths`."""
        counts = np.array([len(self.dictionary.get(n, ())) for n in lengths])
        k = int(rng.integers(counts.sum()))
        n = lengths[int(np.searchsorted(np.cumsum(counts), k, side="right"))]
        return self.dictionary[n][k - int(counts[: lengths.index(n)].sum())]

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        if self.dictionary is not None:
            return self.from_dictionary(rng, split)
        n = uniform_int(rng, self.cfg.split_range(split))
        if n >= 4 and rng.random() < self.cfg.hyphen_prob:
            first = 2 + int(rng.integers(n - 3))  # both parts >= 2 letters
            word = self.part(rng, first) + HYPHEN + self.part(rng, n - first)
        else:
            word = self.part(rng, n)
        return self.render(word, n)

    def from_dictionary(self, rng: np.random.Generator, split: str) -> Example:
        low, high = self.cfg.split_range(split)
        word = self.real_word(rng, range(low, high + 1))
        if len(word) >= 4 and rng.random() < self.cfg.hyphen_prob:  # two words of the same total length
            first = 2 + int(rng.integers(len(word) - 3))
            parts = [self.dictionary.get(first), self.dictionary.get(len(word) - first)]
            if all(parts):
                word = HYPHEN.join(p[int(rng.integers(len(p)))] for p in parts)
        return self.render(word, len(word.replace(HYPHEN, "")))

    def render(self, word: str, n: int) -> Example:
        answer = to_pig_latin(word)
        tokens, targets = answer_rows(self.vocab.ids(list(word) + [SEP]), self.vocab.ids(list(answer) + [END]))
        return Example(f"Pig Latin: {word} ->", " " + answer, tokens, targets,
                       {"letters": n, "hyphenated": HYPHEN in word})
