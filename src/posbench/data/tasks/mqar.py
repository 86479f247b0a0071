"""mqar: multi-query associative recall (Arora et al. 2023, "Zoology", arXiv 2312.04927). A context of
key-value pairs, then the keys asked again among filler; at each asked key the target is the value bound to it
in the context. A labelling task: the value is predicted at the query key's own position, never written.

    tokens   k3 v7 k9 v2 | k9  x  x  x  k3  x  x  x      (2 pairs, 16 tokens per pair would make 32)
    targets   -  -  -  - | v2  -  -  -  v7  -  -  -

Length follows from the pair count (`tokens_per_pair` x pairs), so OOD (more pairs than any ID example) is
longer than any ID example: the model must recall across more pairs and from positions it never saw.

What follows Zoology's generator, HazyResearch/zoology `zoology/data/multiquery_ar.py` (commit d88d6f5;
`multiquery_ar`), line by line:
- keys from the lower half of the ids `1 .. V/2-1`, values from the upper half `V/2 .. V-1` (lines 98-100);
- within an example no key and no value repeats: both drawn without replacement (lines 102-106);
- the context is `k v k v ...` (lines 109-111), the query region after it holds `space = (T - 2n) / 2` two-token
  slots (line 115), and the slot of each query is drawn without replacement with probability proportional to
  `i^(power_a - 1)`, i = 1..space (lines 116-120): queries bunch near the context at the default
  `power_a = 0.01` (`MQARConfig`, line 10); `power_a = 1` is uniform (its docstring, lines 48-50). The j-th key of
  the context goes to the j-th drawn slot (line 124), as here;
- a query key sits at `2n + 2 x slot` and its label, the value, at the same position of the label row (lines
  123-133: labels written one further on, then both rows shifted by one), -100 everywhere else, so only the
  value after each query key is scored; every key is asked once (`num_kv_pairs` queries);
- the rest of the query region is random tokens (`random_non_queries=True`, lines 136-137).
Zoology's settings: vocab 8,192 (`DataSegmentConfig`, zoology/config.py line 71); 64 tokens for 4 pairs, 128
for 8, 256 for 16 (`zoology/experiments/mqar_example_configs/original_mqar_configs.py` lines 15-17): 16 tokens per
pair, this task's default.

Where this differs, and why: ids are the same (0 is our <pad> and never an input; Zoology's 0 is a filler token
that is never a key). Filler is drawn from ids 1..V-1 less this example's keys (Zoology: the whole vocabulary),
so every later occurrence of a context key is a query and the text form's answer is unambiguous; Zoology's
filler holds one of the keys with probability n/V per token (1/128 at 64 pairs and V = 8,192). `queries` below
n asks a random subset of the keys (Zoology asks all). Chance is one over the number of value tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posbench.data.tasks.task import IGNORE, TASKS, Example, Task, TaskConfig, Vocab, label_rows, require, uniform_int


@TASKS.register("mqar")
class MQAR(Task):
    summary = "multi-query associative recall: the value bound to each key asked again after the pairs (Zoology)"

    @dataclass
    class Config(TaskConfig):
        id_range: tuple[int, int] = (4, 16)  # key-value pairs per example
        ood_range: tuple[int, int] = (17, 64)
        vocab_size: int = 8192  # token ids, <pad> included: keys 1..V/2-1, values V/2..V-1 (Zoology's split)
        tokens_per_pair: int = 16  # sequence length = this x pairs (Zoology: 64 tokens at 4 pairs ... 256 at 16)
        power_a: float = 0.01  # query slot i (1-based) drawn with weight i^(power_a - 1); 1.0 is uniform
        queries: int = 0  # keys asked per example; 0 asks every key once (Zoology)

        def check(self) -> None:
            super().check()
            n_max = self.ood_range[1]
            require(self.vocab_size % 2 == 0 and self.vocab_size // 2 - 1 >= n_max,
                    f"task `{self.name}`: vocab_size={self.vocab_size} must be even with at least "
                    f"ood_range[1]={n_max} keys in its lower half (vocab_size >= {2 * n_max + 2})")
            require(self.tokens_per_pair >= 4 and self.tokens_per_pair % 2 == 0,
                    f"task `{self.name}`: tokens_per_pair={self.tokens_per_pair} must be even and >= 4 (a pair "
                    f"and a query slot for each pair)")
            require(self.power_a > 0, f"task `{self.name}`: power_a={self.power_a} must be > 0 (1.0 is uniform)")
            require(0 <= self.queries <= self.id_range[0],
                    f"task `{self.name}`: queries={self.queries} must be in [0, id_range[0]={self.id_range[0]}] "
                    f"(0 asks every key)")

    def build_vocab(self) -> Vocab:
        half = self.cfg.vocab_size // 2
        return Vocab([f"k{i}" for i in range(1, half)], [f"v{i}" for i in range(half, self.cfg.vocab_size)])

    def max_tokens(self, split: str) -> int:
        return self.cfg.tokens_per_pair * self.cfg.split_range(split)[1]

    @property
    def chance_accuracy(self) -> float:
        return 1.0 / (self.cfg.vocab_size - self.cfg.vocab_size // 2)  # a uniform guess among the values

    def slot_probabilities(self, space: int) -> np.ndarray:
        """P(query slot = s) for s = 0..space-1 of a single draw: Zoology's power law over 1-based slots."""
        a = self.cfg.power_a
        w = np.arange(1, space + 1, dtype=np.float64) ** (a - 1.0)
        return w / w.sum()

    def generate(self, rng: np.random.Generator, split: str) -> Example:
        n = uniform_int(rng, self.cfg.split_range(split))
        half, length = self.cfg.vocab_size // 2, self.cfg.tokens_per_pair * n
        keys = rng.choice(np.arange(1, half), size=n, replace=False)
        values = rng.choice(np.arange(half, self.cfg.vocab_size), size=n, replace=False)
        q = self.cfg.queries or n
        asked = np.sort(rng.choice(n, size=q, replace=False))  # context order, as Zoology's key j -> draw j
        space = (length - 2 * n) // 2
        slots = rng.choice(space, size=q, replace=False, p=self.slot_probabilities(space))

        tokens = np.empty(length, dtype=np.int64)
        tokens[0:2 * n:2], tokens[1:2 * n:2] = keys, values
        not_keys = np.setdiff1d(np.arange(1, self.cfg.vocab_size), keys)  # filler never repeats a key
        tokens[2 * n:] = rng.choice(not_keys, size=length - 2 * n)
        targets = np.full(length, IGNORE, dtype=np.int64)
        where = 2 * n + 2 * slots
        tokens[where], targets[where] = keys[asked], values[asked]

        items = self.vocab.decode(tokens)
        order = np.argsort(where)  # the text form answers in reading order
        prompt = f"Give the value of each key asked again: {' '.join(items)} ->"
        answer = " " + " ".join(self.vocab.symbols[int(v)] for v in values[asked][order])
        tokens_T, targets_T = label_rows(tokens.tolist(), targets.tolist())
        return Example(prompt, answer, tokens_T, targets_T,
                       {"length": length, "pairs": n, "queries": q, "mean_slot": float(slots.mean()),
                        "space": space})
