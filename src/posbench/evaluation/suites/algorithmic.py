"""Algorithmic tasks, in and out of distribution, zero- and few-shot: greedy decoding, exact match.

For every task (data/tasks/), split ("id", "ood") and number of shots k, examples 0..n-1 of the split
are asked in their text form, tokenized with the checkpoint's tokenizer:

    <|bos|> demo_1.prompt demo_1.answer SEP ... demo_k.prompt demo_k.answer SEP query.prompt

(each piece tokenized on its own, so the query's tokens are exactly `encode(query.prompt)` whatever the
demos). Demonstrations are examples of the "train" split (what task mixing puts into pretraining; the
"id" split is kept disjoint from it by content) or, with demo_split=same, of the query's own split;
query i always gets the same demos, so the k-shot demos are a prefix of the (k+1)-shot ones.
The model decodes as many tokens as the reference answer has; the example is correct when they decode
to exactly the answer string. A cell (task, split, shots) with any prompt longer than the PE's
positions is "n/a": a score over the prompts that happen to fit would be biased towards short ones.

Besides exact match (`accuracy`, whole answers), each cell splits the answer tokens by where they are
predicted (`position_split`): answer token i is predicted at position len(prompt) + i - 1; it counts as
*beyond* the training length when that position is >= the checkpoint's `model.seq_len`, else *within*.
`within_accuracy` / `beyond_accuracy` are the shares of those answer tokens the greedy output gets right
position by position (None where a cell has no such token), `n_beyond` how many there are: only the
beyond share measures extrapolation in position, where exact match of a long example mixes both.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from posbench.config_loader import ConfigError
from posbench.data.tasks import TaskConfig, build_task, get_task_class, task_names
from posbench.evaluation import eval_plots
from posbench.evaluation.evaluator import Evaluator, Session, Target
from posbench.evaluation.generate import decode, greedy_generate
from posbench.evaluation.markdown import md_table, pct
from posbench.evaluation.suite_registry import SUITES

DEMO_OFFSET = 1_000_000  # demonstration indices start here, far from the query indices 0..n-1
SPLIT_LABEL = {"id": "ID", "ood": "OOD"}
PLOT_LABEL = {"id": "ID exact match", "ood": "OOD exact match (whole answers, all positions)"}
BEYOND_LABEL = "OOD beyond train length (answer tokens right)"


@dataclass
class AlgorithmicConfig:
    # [] = the tasks the checkpoint was pretrained with (its data.mix, same options), else every registered
    # task with its default ranges
    tasks: list[TaskConfig] = field(default_factory=list)
    splits: list[Literal["id", "ood"]] = field(default_factory=lambda: ["id", "ood"])
    shots: list[int] = field(default_factory=lambda: [0, 3])
    n_examples: int = 32  # per (task, split, shots)
    demo_split: Literal["train", "same"] = "train"
    separator: str = "\n"  # after each demonstration
    samples_kept: int = 3  # predictions saved per cell in results.json, for reading failures

    def __post_init__(self):
        if self.n_examples < 1 or not self.shots or min(self.shots) < 0 or not self.splits:
            raise ConfigError("algorithmic: need n_examples >= 1, shots >= 0 (e.g. [0, 3]) and at least one split")
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            raise ConfigError(f"algorithmic.tasks lists a task twice: {names}")


def position_split(prompt_len: int, answer_ids: list[int], output_ids: list[int], train_len: int
                   ) -> tuple[int, int, int, int]:
    """(within right, within total, beyond right, beyond total) over the answer tokens of one example."""
    counts = [0, 0, 0, 0]
    for i, want in enumerate(answer_ids):
        side = 2 if prompt_len + i - 1 >= train_len else 0
        counts[side + 1] += 1
        counts[side] += int(i < len(output_ids) and output_ids[i] == want)
    return counts[0], counts[1], counts[2], counts[3]


def _ratio(hits: int, total: int) -> float | None:
    return hits / total if total else None


def pretrained_with_mix(run) -> bool:
    """The run trained on shards holding task documents: its tasks are asked as text, in the mix's format."""
    return run.train.stream == "shards" and run.data.mix.active


@SUITES.register("algorithmic")
class Algorithmic(Evaluator):
    title = "Algorithmic tasks (exact match, greedy decoding)"
    options = AlgorithmicConfig
    order = 2

    def __init__(self, cfg: AlgorithmicConfig, target: Target):
        super().__init__(cfg, target)
        run = target.run_cfg
        configs = cfg.tasks or (list(run.data.mix.tasks) if pretrained_with_mix(run) else
                                [get_task_class(n).Config() for n in task_names()])
        self.tasks = [build_task(c) for c in configs]

    def cells(self):
        for task in self.tasks:
            for split in self.cfg.splits:
                for shots in self.cfg.shots:
                    yield task, split, shots

    def work(self) -> int:
        return len(list(self.cells())) * self.cfg.n_examples

    def prompt(self, task, split: str, shots: int, index: int) -> tuple[list[int], str]:
        tok, seed = self.target.tokenizer, self.target.seed
        demo_split = "train" if self.cfg.demo_split == "train" else split
        ids = [tok.bos_id]
        for j in range(shots):
            demo = task.example(seed, DEMO_OFFSET + index * max(self.cfg.shots) + j, demo_split)
            ids += tok.encode(demo.text + self.cfg.separator)
        query = task.example(seed, index, split)
        return ids + tok.encode(query.prompt), query.answer

    def run(self, session: Session) -> dict:
        tok = self.target.tokenizer
        cells = list(self.cells())
        prompts, answers, owner = [], [], []
        for c, (task, split, shots) in enumerate(cells):
            for i in range(self.cfg.n_examples):
                ids, answer = self.prompt(task, split, shots, i)
                prompts.append(ids)
                answers.append(answer)
                owner.append(c)
        n_new = [len(tok.encode(a)) for a in answers]
        # every prompt of every cell in one call, so same-length prompts of different cells share batches
        outputs = greedy_generate(session.model, prompts, n_new, session.device, self.target.batch_size,
                                  session.autocast, session.progress)
        results = []
        for c, (task, split, shots) in enumerate(cells):
            rows = [k for k, o in enumerate(owner) if o == c]
            done = [k for k in rows if outputs[k] is not None]
            texts = {k: decode(tok, outputs[k]) for k in done}
            correct = sum(texts[k] == answers[k] for k in done)
            n_na = len(rows) - len(done)
            split_counts = [position_split(len(prompts[k]), tok.encode(answers[k]), outputs[k], self.target.train_len)
                            for k in done]
            w_hit, w_n, b_hit, b_n = (sum(c[i] for c in split_counts) for i in range(4))
            lengths = [len(prompts[k]) + n_new[k] for k in rows]
            results.append({
                "task": task.name, "split": split, "shots": shots, "n": len(rows), "n_na": n_na,
                "correct": None if n_na else correct, "accuracy": None if n_na else correct / len(rows),
                "within_accuracy": None if n_na else _ratio(w_hit, w_n),
                "beyond_accuracy": None if n_na else _ratio(b_hit, b_n), "n_beyond": b_n,
                "na": (f"{n_na} of {len(rows)} prompts need more positions than the PE represents "
                       f"(prompt + answer: {min(lengths)}..{max(lengths)} tokens)") if n_na else None,
                "tokens_mean": float(np.mean(lengths)), "tokens_max": max(lengths),
                "chance_per_token": task.chance_accuracy,
                # what always giving this cell's commonest answer scores: a balanced yes/no task's 128 examples
                # are rarely 64/64, so a model that answers "yes" to everything is not at 50%
                "most_common_answer_accuracy": max(Counter(answers[k] for k in rows).values()) / len(rows),
                "samples": [{"prompt_tail": tok.decode(prompts[k][-60:]), "answer": answers[k],
                             "output": texts.get(k)} for k in rows[: self.cfg.samples_kept]],
            })
        return {"n_examples": self.cfg.n_examples, "shots": list(self.cfg.shots), "splits": list(self.cfg.splits),
                "demo_split": self.cfg.demo_split, "seed": self.target.seed, "train_len": self.target.train_len,
                "cells": results}

    # -- report ----------------------------------------------------------------------------------------------
    @staticmethod
    def _columns(result: dict) -> list[tuple[str, int]]:
        return [(split, shots) for split in result["splits"] for shots in result["shots"]]

    @staticmethod
    def _lookup(result: dict) -> dict:
        return {(c["task"], c["split"], c["shots"]): c for c in result["cells"]}

    @classmethod
    def markdown(cls, result: dict) -> str:
        cols, cells = cls._columns(result), cls._lookup(result)
        tasks = list(dict.fromkeys(c["task"] for c in result["cells"]))
        beyond = [(s, k) for s, k in cols if any(c.get("n_beyond") for c in result["cells"] if c["split"] == s)]
        header = ["task", *(f"{SPLIT_LABEL[s]} {k}-shot" for s, k in cols),
                  *(f"{SPLIT_LABEL[s]} {k}-shot beyond train length (tokens)" for s, k in beyond), "chance/token",
                  f"{SPLIT_LABEL[cols[0][0]]} always the commonest answer"]
        rows = [[t, *(pct(cells[(t, s, k)]["accuracy"]) for s, k in cols),
                 *(pct(cells[(t, s, k)].get("beyond_accuracy")) for s, k in beyond),
                 f"{cells[(t, *cols[0])]['chance_per_token']:.2f}",
                 pct(cells[(t, *cols[0])].get("most_common_answer_accuracy"))] for t in tasks]
        note = (f" Beyond columns: answer tokens predicted past the training length ({result.get('train_len')} "
                "tokens), position by position." if beyond else " No answer token lies past the training length.")
        return (f"{result['n_examples']} examples per cell; demonstrations from the `{result['demo_split']}` "
                f"split. Exact match of whole answers.{note}\n\n" + md_table(header, rows))

    @classmethod
    def comparison(cls, results: dict[str, dict]) -> str:
        parts = []
        first = next(iter(results.values()))
        for shots in first["shots"]:
            header, rows = ["task"], {}
            for label, res in results.items():
                cells = cls._lookup(res)
                for split in res["splits"]:
                    header.append(f"{label} {SPLIT_LABEL[split]}")
                    for t in dict.fromkeys(c["task"] for c in res["cells"]):
                        rows.setdefault(t, []).append(pct(cells[(t, split, shots)]["accuracy"])
                                                      if (t, split, shots) in cells else "-")
            parts += [f"Exact match, {shots}-shot:", "", md_table(header, [[t, *v] for t, v in rows.items()]), ""]
        return "\n".join(parts).rstrip()

    @classmethod
    def plots(cls, results: dict[str, dict], out_dir: Path) -> list[Path]:
        panels, groups, chance = {}, [], []
        for label, res in results.items():
            cells = cls._lookup(res)
            tasks = list(dict.fromkeys(c["task"] for c in res["cells"]))
            groups = groups or tasks
            chance = chance or [cells[(t, res["splits"][0], res["shots"][0])]["chance_per_token"] for t in groups]
            for shots in res["shots"]:
                # which accuracy each bar is: whole answers (OOD: every answer token, inside the training
                # length too), and the answer tokens past the training length, the extrapolation measure
                series = {PLOT_LABEL[s]: [cells[(t, s, shots)]["accuracy"] if (t, s, shots) in cells else None
                                          for t in groups] for s in res["splits"]}
                if any(c.get("n_beyond") for c in res["cells"]):
                    series[BEYOND_LABEL] = [cells[(t, "ood", shots)].get("beyond_accuracy")
                                            if (t, "ood", shots) in cells else None for t in groups]
                panels[f"{label}, {shots}-shot"] = series
        return [eval_plots.grouped_bars(out_dir / "algorithmic_id_ood.png", panels, groups, "share right",
                                        "Algorithmic tasks: in vs out of distribution", chance)]
