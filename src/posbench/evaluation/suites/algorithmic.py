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

In distribution means inside the training length: every "id" prompt, answer included, fits in the checkpoint's
`model.seq_len`. Its demonstrations are the first of its candidates (the usual max(shots), then SPARES more of
the same split) that still fit beside the query, so k-shot stays a prefix of (k+1)-shot; the cell reports how
many longer candidates were passed over. An "id" cell whose queries alone do not fit, or that cannot hold k
demonstrations for every query, is n/a and says which. "ood" prompts are not trimmed: they are meant to run past.

Chance: `chance_whole_answer` is what guessing uniformly scores in exact match, the per-target chance of the
task (`chance_per_token`, kept) to the power of the answer's targets (its closing <end>/<fill> symbols aside),
averaged over the cell's examples; it is the number to read beside exact match (~0 for multi-token answers).

Besides exact match (`accuracy`, whole answers), each cell splits the answer tokens by where they are
predicted (`position_split`): answer token i is predicted at position len(prompt) + i - 1; it counts as
*beyond* the training length when that position is >= the checkpoint's `model.seq_len`, else *within*.
`within_accuracy` / `beyond_accuracy` are the shares of those answer tokens the greedy output gets right
position by position (None where a cell has no such token), `n_beyond` how many there are: only the
beyond share measures extrapolation in position, where exact match of a long example mixes both.

A checkpoint that trained with its mix's position ids (evaluation/data_ids.py: abacus or coupled on shards whose
task documents carried digit places) is asked with them, each prompt token with the id its pretraining document
gave it: <|bos|> and every separator TEXT_ID, a demonstration's text and the query's prompt the task's
`text_positions` (TEXT_ID throughout for a task without ids, as the shards hold it), each generated token by the
task's own rule (`data_ids.task_answer_rule`). The result's `positions` says which positions were used; every
other checkpoint is asked with its own, no ids passed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np

from posbench.config_loader import Checked
from posbench.data.tasks import TaskConfig, build_task, get_task_class, task_names
from posbench.data.token_positions import TEXT_ID
from posbench.errors import ConfigError
from posbench.evaluation import data_ids, eval_plots
from posbench.evaluation.evaluator import Evaluator, Session, Target
from posbench.evaluation.generate import PromptIds, decode, greedy_generate
from posbench.evaluation.markdown import md_table, pct
from posbench.evaluation.suite_registry import SUITES
from posbench.targets import IGNORE

DEMO_OFFSET = 1_000_000  # demonstration indices start here, far from the query indices 0..n-1
SPARE_OFFSET = 3_000_000  # spare demonstration candidates of "id" prompts, after the usual ones
SPARES = 16  # per "id" query: candidates tried beyond the usual max(shots) to fill its shots inside the training length
CLOSERS = ("<end>", "<fill>")  # symbols that close an answer's token form: no choice to guess
SPLIT_LABEL = {"id": "ID", "ood": "OOD"}
PLOT_LABEL = {"id": "ID exact match", "ood": "OOD exact match (whole answers, all positions)"}
BEYOND_LABEL = "OOD beyond train length (answer tokens right)"


class Built(NamedTuple):
    ids: list[int] | None  # <|bos|> demos query; None when an "id" prompt cannot fit in the training length
    answer: str
    chance: float  # exact match by uniform guessing (see the module docstring)
    passed_over: int  # demonstration candidates too long to fit beside the query ("id" prompts)
    need: int  # tokens of <|bos|> query answer, the least the prompt takes
    positions: list[int] | None = None  # the data id of each of `ids` (a run trained with them), else None


def answer_chance(task, example) -> float:
    """Exact match of `example`'s whole answer by guessing each of its targets uniformly."""
    targets = [int(t) for t in example.targets_T if t != IGNORE]
    n = sum(symbol not in CLOSERS for symbol in task.vocab.decode(targets))
    return task.chance_accuracy ** n


@dataclass(frozen=True)
class AlgorithmicConfig(Checked):
    # [] = the tasks the checkpoint was pretrained with (its data.mix, same options), else every registered
    # task with its default ranges
    tasks: list[TaskConfig] = field(default_factory=list)
    splits: list[Literal["id", "ood"]] = field(default_factory=lambda: ["id", "ood"])
    shots: list[int] = field(default_factory=lambda: [0, 3])
    n_examples: int = 32  # per (task, split, shots)
    demo_split: Literal["train", "same"] = "train"
    separator: str = "\n"  # after each demonstration
    samples_kept: int = 3  # predictions saved per cell in results.json, for reading failures

    def check(self) -> None:
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


def trained_tasks(run) -> list:
    """The task configs a checkpoint trained on, asked when `algorithmic.tasks` is empty: a task model's own task
    (train.stream=task, a study cell), a mix's tasks, else every registered task with its defaults."""
    if run.train.stream == "task" and run.data.task is not None:
        return [run.data.task]
    if pretrained_with_mix(run):
        return list(run.data.mix.tasks)
    return [get_task_class(n).Config() for n in task_names()]


@SUITES.register("algorithmic")
class Algorithmic(Evaluator):
    title = "Algorithmic tasks (exact match, greedy decoding)"
    options = AlgorithmicConfig
    order = 2
    per_cell = "n_examples"

    def __init__(self, cfg: AlgorithmicConfig, target: Target):
        super().__init__(cfg, target)
        run = target.run_cfg
        configs = cfg.tasks or trained_tasks(run)
        self.tasks = [build_task(c) for c in configs]
        self.with_ids = data_ids.trained_with_ids(run)

    def cells(self):
        for task in self.tasks:
            for split in self.cfg.splits:
                for shots in self.cfg.shots:
                    yield task, split, shots

    def work(self) -> int:
        return len(list(self.cells())) * self.cfg.n_examples

    def budget(self, split: str) -> int | None:
        """Tokens a prompt and its answer may take: the training length in distribution, else no bound."""
        return self.target.train_len if split == "id" else None

    def candidates(self, task, split: str, index: int):
        """Query `index`'s demonstration candidates, as (token ids, their data ids or None): the usual max(shots),
        then (for "id" prompts, which must fit) SPARES more."""
        tok, seed, m = self.target.tokenizer, self.target.seed, max(self.cfg.shots)
        demo_split = "train" if self.cfg.demo_split == "train" else split
        indices = [DEMO_OFFSET + index * m + j for j in range(m)]
        if self.budget(split) is not None:
            indices += [SPARE_OFFSET + index * SPARES + j for j in range(SPARES)]
        for i in indices:
            demo = task.example(seed, i, demo_split)
            ids = tok.encode(demo.text + self.cfg.separator)
            yield ids, (self.piece_ids(task, demo, demo.text, ids) if self.with_ids else None)

    def piece_ids(self, task, ex, text: str, ids: list[int]) -> list[int]:
        """Data ids of a prompt piece `ids`: `text` (the start of `ex.text`) as its document carried it, then
        TEXT_ID for what follows (the separator)."""
        own = data_ids.task_piece_ids(self.target.tokenizer, task, ex, text)
        if ids[:len(own)] != self.target.tokenizer.encode(text):
            raise AssertionError(f"task `{task.name}`: the separator changed how {text[:40]!r} tokenizes")
        return own + [TEXT_ID] * (len(ids) - len(own))

    def prompt(self, task, split: str, shots: int, index: int) -> Built:
        tok = self.target.tokenizer
        query = task.example(self.target.seed, index, split)
        ids, chance = tok.encode(query.prompt), answer_chance(task, query)
        need = 1 + len(ids) + len(tok.encode(query.answer))
        budget, used = self.budget(split), need
        if budget is not None and need > budget:
            return Built(None, query.answer, chance, 0, need)
        demos, passed = [], 0
        for demo in self.candidates(task, split, index) if shots else ():
            if budget is None or used + len(demo[0]) <= budget:
                demos.append(demo)
                used += len(demo[0])
                if len(demos) == shots:
                    break
            else:
                passed += 1
        if len(demos) < shots:
            return Built(None, query.answer, chance, passed, need)
        positions = None
        if self.with_ids:
            positions = [TEXT_ID, *(p for _, d in demos for p in d), *self.piece_ids(task, query, query.prompt, ids)]
        return Built([tok.bos_id, *(t for d, _ in demos for t in d), *ids], query.answer, chance, passed, need,
                     positions)

    def run(self, session: Session) -> dict:
        tok = self.target.tokenizer
        cells = list(self.cells())
        built, owner = [], []
        for c, (task, split, shots) in enumerate(cells):
            for i in range(self.cfg.n_examples):
                built.append(self.prompt(task, split, shots, i))
                owner.append(c)
        answers = [b.answer for b in built]
        n_new = [len(tok.encode(a)) for a in answers]
        # a cell with a prompt that cannot fit in the training length is n/a as a whole: nothing of it is asked
        unfit = {owner[k] for k, b in enumerate(built) if b.ids is None}
        asked = [k for k, b in enumerate(built) if owner[k] not in unfit]
        prompts = {k: built[k].ids for k in asked}
        ids = None
        if self.with_ids:
            rules = {task.name: data_ids.task_answer_rule(tok, task) for task in self.tasks}
            ids = [PromptIds(built[k].positions, rules[cells[owner[k]][0].name]) for k in asked]
        # every prompt of every cell in one call, so same-length prompts of different cells share batches
        got = greedy_generate(session.model, [prompts[k] for k in asked], [n_new[k] for k in asked], session.device,
                              self.target.batch_size, session.autocast, session.progress, data_ids=ids)
        session.progress.update(len(built) - len(asked))
        outputs = dict(zip(asked, got, strict=True))
        results = []
        for c, (task, split, shots) in enumerate(cells):
            rows = [k for k, o in enumerate(owner) if o == c]
            done = [k for k in rows if outputs.get(k) is not None]
            texts = {k: decode(tok, outputs[k]) for k in done}
            correct = sum(texts[k] == answers[k] for k in done)
            n_na = len(rows) - len(done)
            split_counts = [position_split(len(prompts[k]), tok.encode(answers[k]), outputs[k], self.target.train_len)
                            for k in done]
            w_hit, w_n, b_hit, b_n = (sum(c[i] for c in split_counts) for i in range(4))
            lengths = [len(prompts[k]) + n_new[k] for k in rows if k in prompts]
            results.append({
                "task": task.name, "split": split, "shots": shots, "n": len(rows), "n_na": n_na,
                "correct": None if n_na else correct, "accuracy": None if n_na else correct / len(rows),
                "within_accuracy": None if n_na else _ratio(w_hit, w_n),
                "beyond_accuracy": None if n_na else _ratio(b_hit, b_n), "n_beyond": b_n,
                "beyond_na": None if n_na or b_n else "no answer token lies past the training length",
                "na": (self.unfit_reason([built[k] for k in rows], split, shots) if c in unfit else
                       f"{n_na} of {len(rows)} prompts need more positions than the PE represents "
                       f"(prompt + answer: {min(lengths)}..{max(lengths)} tokens)" if n_na else None),
                "fits_in": self.budget(split), "demos_passed_over": sum(built[k].passed_over for k in rows),
                "tokens_mean": float(np.mean(lengths)) if lengths else None,
                "tokens_max": max(lengths) if lengths else None,
                "chance_per_token": task.chance_accuracy,
                "chance_whole_answer": float(np.mean([built[k].chance for k in rows])),
                # what always giving this cell's commonest answer scores: a balanced yes/no task's 128 examples
                # are rarely 64/64, so a model that answers "yes" to everything is not at 50%
                "most_common_answer_accuracy": max(Counter(answers[k] for k in rows).values()) / len(rows),
                "samples": [{"prompt_tail": tok.decode(prompts[k][-60:]) if k in prompts else None,
                             "answer": answers[k], "output": texts.get(k)} for k in rows[: self.cfg.samples_kept]],
            })
        return {"n_examples": self.cfg.n_examples, "shots": list(self.cfg.shots), "splits": list(self.cfg.splits),
                "demo_split": self.cfg.demo_split, "seed": self.target.seed, "train_len": self.target.train_len,
                "cells": results, "positions": data_ids.TASK_IDS if self.with_ids else data_ids.OWN}

    def unfit_reason(self, rows: list[Built], split: str, shots: int) -> str:
        """Why an "id" cell is n/a: its queries alone, or with k demonstrations, do not fit in the training length."""
        L, n = self.budget(split), len(rows)
        alone = [b.need for b in rows if b.need > L]
        if alone:
            return (f"not in distribution: {len(alone)} of {n} queries with their answers alone take more than the "
                    f"training length ({min(alone)}..{max(alone)} tokens > {L})")
        short = sum(b.ids is None for b in rows)
        return (f"{short} of {n} prompts cannot hold {shots} demonstrations beside the query within the training "
                f"length ({L} tokens; {max(self.cfg.shots) + SPARES} candidates each)")

    # -- report ----------------------------------------------------------------------------------------------
    @staticmethod
    def _columns(result: dict) -> list[tuple[str, int]]:
        return [(split, shots) for split in result["splits"] for shots in result["shots"]]

    @staticmethod
    def _lookup(result: dict) -> dict:
        return {(c["task"], c["split"], c["shots"]): c for c in result["cells"]}

    @staticmethod
    def _chance(cell: dict | None) -> str:
        """A whole-answer chance as a percentage with its first significant digit (they run to 1e-10)."""
        p = (cell or {}).get("chance_whole_answer")
        return "-" if p is None else pct(p) if p >= 1e-3 else f"{100 * p:.1g}%"

    @staticmethod
    def _na_notes(result: dict, label: str = "") -> list[str]:
        """One line per n/a cell with its reason."""
        return [f"- {label}{c['task']} {SPLIT_LABEL[c['split']]} {c['shots']}-shot: n/a, {c['na']}"
                for c in result["cells"] if c.get("na")]

    @classmethod
    def markdown(cls, result: dict) -> str:
        cols, cells = cls._columns(result), cls._lookup(result)
        tasks = list(dict.fromkeys(c["task"] for c in result["cells"]))
        beyond = [(s, k) for s, k in cols if any(c.get("n_beyond") for c in result["cells"] if c["split"] == s)]
        header = ["task", *(f"{SPLIT_LABEL[s]} {k}-shot" for s, k in cols),
                  *(f"{SPLIT_LABEL[s]} {k}-shot beyond train length (tokens)" for s, k in beyond),
                  *(f"{SPLIT_LABEL[s]} chance (whole answer)" for s in result["splits"]),
                  *(["chance per answer token (beside beyond)"] if beyond else []),
                  f"{SPLIT_LABEL[cols[0][0]]} always the commonest answer"]
        rows = [[t, *(pct(cells[(t, s, k)]["accuracy"]) for s, k in cols),
                 *(pct(cells[(t, s, k)].get("beyond_accuracy")) for s, k in beyond),
                 *(cls._chance(cells.get((t, s, result["shots"][0]))) for s in result["splits"]),
                 *([pct(cells[(t, *beyond[0])].get("chance_per_token"))] if beyond else []),
                 pct(cells[(t, *cols[0])].get("most_common_answer_accuracy"))] for t in tasks]
        L = result.get("train_len")
        note = (f" Beyond columns: answer tokens predicted past the training length ({L} tokens), position by "
                "position, beside the chance of one answer token; n/a where a cell has no answer token there."
                if beyond else
                " No answer token lies past the training length.")
        fitted = [c for c in result["cells"] if c.get("fits_in")]
        if fitted:
            passed = sum(c.get("demos_passed_over", 0) for c in fitted)
            note += (f" ID prompts, answer included, stay inside the training length ({L} tokens): each takes the "
                     f"first demonstrations that fit beside its query ({passed} longer candidates passed over in all).")
        used = result.get("positions", data_ids.OWN)
        if used != data_ids.OWN:
            note += f" Positions: {used}."
        notes = cls._na_notes(result)
        return (f"{result['n_examples']} examples per cell; demonstrations from the `{result['demo_split']}` "
                f"split. Exact match of whole answers, beside what guessing each answer symbol uniformly "
                f"scores.{note}\n\n" + md_table(header, rows) + ("\n\n" + "\n".join(notes) if notes else ""))

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
        notes = [line for label, res in results.items() for line in cls._na_notes(res, f"{label}: ")]
        notes += [f"- {label}: Positions: {res['positions']}." for label, res in results.items()
                  if res.get("positions", data_ids.OWN) != data_ids.OWN]
        return "\n".join(parts + notes).rstrip()

    @classmethod
    def plots(cls, results: dict[str, dict], out_dir: Path) -> list[Path]:
        panels, chance, groups = {}, {}, []
        for label, res in results.items():
            cells = cls._lookup(res)
            groups = groups or list(dict.fromkeys(c["task"] for c in res["cells"]))
            for shots in res["shots"]:
                # which accuracy each bar is: whole answers (OOD: every answer token, inside the training
                # length too), and the answer tokens past the training length, the extrapolation measure;
                # each whole-answer bar gets its whole-answer chance beside it
                key = f"{label}, {shots}-shot"
                series = {PLOT_LABEL[s]: [cells[(t, s, shots)]["accuracy"] if (t, s, shots) in cells else None
                                          for t in groups] for s in res["splits"]}
                chance[key] = {PLOT_LABEL[s]: [cells[(t, s, shots)].get("chance_whole_answer")
                                               if (t, s, shots) in cells else None for t in groups]
                               for s in res["splits"]}
                if any(c.get("n_beyond") for c in res["cells"]):
                    series[BEYOND_LABEL] = [cells[(t, "ood", shots)].get("beyond_accuracy")
                                            if (t, "ood", shots) in cells else None for t in groups]
                    # a share of answer tokens right stands beside the chance of one answer token
                    chance[key][BEYOND_LABEL] = [cells[(t, "ood", shots)].get("chance_per_token")
                                                 if (t, "ood", shots) in cells else None for t in groups]
                panels[key] = series
        return [eval_plots.grouped_bars(out_dir / "algorithmic_id_ood.png", panels, groups, "share right",
                                        "Algorithmic tasks: in vs out of distribution", chance,
                                        {BEYOND_LABEL: "answer token"})]
