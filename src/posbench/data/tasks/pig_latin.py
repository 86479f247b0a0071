"""pig_latin: a made-up word -> Pig Latin, letter by letter. OOD = longer words (defaults: ID 3-6
letters, OOD 7-12; hyphens not counted).

    tokens  s t r o n g <sep> o n g s t r a y <end>        text  "Pig Latin: strong ->" + " ongstray"

Rules: a word starting with a vowel gets "way" (apple -> appleway); otherwise its leading consonant
cluster moves to the end and gets "ay" (strong -> ongstray). "y" is a consonant only as the first letter
(rhythm -> ythmrhay), "qu" moves as one (queen -> eenquay), a word without vowels just gets "ay".
Hyphenated words convert each part (well-known -> ellway-ownknay). Words are drawn as an onset cluster
followed by alternating vowels and consonants, hyphenated with probability `hyphen_prob`.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

from posbench.data.tasks.base import Example, Task, TaskConfig, Vocab, answer_rows, register_task, require, uniform_int

VOWELS, CONSONANTS = "aeiou", "bcdfghjklmnprstvwz"
ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y",
          "z", "bl", "br", "ch", "cl", "cr", "dr", "fl", "fr", "gl", "gr", "pl", "pr", "qu", "sh", "sk", "sl", "sm",
          "sn", "sp", "st", "sw", "th", "tr", "tw", "wh", "wr", "rh", "str", "spr", "thr", "squ", "sch"]
SEP, END, HYPHEN = "<sep>", "<end>", "-"


def to_pig_latin(word: str) -> str:
    if HYPHEN in word:
        return HYPHEN.join(to_pig_latin(part) for part in word.split(HYPHEN))
    i = 0
    while i < len(word) and not (word[i] in VOWELS or (word[i] == "y" and i > 0)):
        i += 2 if word[i:i + 2] == "qu" else 1
    return word + "way" if i == 0 else word[i:] + word[:i] + "ay"


@register_task("pig_latin")
class PigLatin(Task):
    summary = "translate a made-up word into Pig Latin"

    @dataclass
    class Config(TaskConfig):
        name: str = "pig_latin"
        id_range: tuple[int, int] = (3, 6)  # letters, hyphens not counted
        ood_range: tuple[int, int] = (7, 12)
        hyphen_prob: float = 0.2  # chance of a two-part hyphenated word (needs >= 4 letters)

        def check(self) -> None:
            require(0.0 <= self.hyphen_prob <= 1.0,
                    f"task `{self.name}`: hyphen_prob={self.hyphen_prob} must be in [0, 1]")
            require(self.id_range[0] >= 2, f"task `{self.name}`: id_range must start at >= 2 letters")

    def build_vocab(self) -> Vocab:
        return Vocab(string.ascii_lowercase, [HYPHEN, SEP, END])

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

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        n = uniform_int(rng, self.cfg.split_range(split))
        if n >= 4 and rng.random() < self.cfg.hyphen_prob:
            first = 2 + int(rng.integers(n - 3))  # both parts >= 2 letters
            word = self.part(rng, first) + HYPHEN + self.part(rng, n - first)
        else:
            word = self.part(rng, n)
        answer = to_pig_latin(word)
        tokens, targets = answer_rows(self.vocab.ids(list(word) + [SEP]), self.vocab.ids(list(answer) + [END]))
        return Example(f"Pig Latin: {word} ->", " " + answer, tokens, targets,
                       {"letters": n, "hyphenated": HYPHEN in word})
