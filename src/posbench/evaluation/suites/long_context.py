"""Long-context probes from 64 tokens up: RULER's synthetic families (Hsieh et al. 2024, arXiv 2404.06654) and
lost-in-the-middle key-value retrieval (Liu et al. 2023, arXiv 2307.03172), with an effective length per model.

Families (data/tasks/ruler_niah.py, variable_tracking.py, word_extraction.py, kv_retrieval.py): every one is
also a `data.mix` task, so by default (`tasks: []`) a checkpoint pretrained with some of them is asked those,
with the options it was trained on, zero-shot in the format it saw; any other checkpoint is asked every family
with its defaults. `shots: k` puts k demonstrations (each family's "train" examples with no units: no filler,
one key-value pair, only the answer's words in a list) before each query for models that never saw the format;
the demonstrations count inside every length, so a cell at the training length stays in distribution, and the
report says "k-shot".

Each family is a retrieval grid (evaluation/retrieval.py: prompts fitted to each length in the checkpoint's
tokenizer, greedy decoding, exact match of the whole answer, n/a where the PE cannot represent the length or
the length cannot hold the question): length x depth for the families with a relevant item (NIAH, key-value),
length alone for the others (their answer is spread over the context). Beside each score: `chance` (uniform
guessing of the answer), `commonest` (the share of the cell's commonest answer when it repeats; 0 when every
answer is different, as a fixed answer then matches nothing it could know), `baseline` = the larger of the two,
and `guess` (a question-blind pick among the context's candidates: 1/4 for 4-key NIAH). Where the context holds one
candidate (single-needle NIAH, one variable chain) that pick is certain, since finding the candidate is the whole
task: it is kept in the results (1.0) but reported as n/a, never as a 100% baseline (`blind_pick`).

Batching: with `exact_length` (default) each fitted prompt is padded to exactly its length with generated filler
text right after <|bos|> (the gap fitting leaves, less than one unit's tokens: a word, a pair), so every prompt
of a length has the same size and greedy decoding runs them as one batch (evaluation/generate.py batches only
equal lengths); the relevant item moves by those few tokens. Each example draws its own haystack, so prompts
share no prefix beyond <|bos|> and the demonstrations; the KV cache is not shared between prompts.

Effective length per family and for the mean over families: evaluation/effective_length.py (the longest tested
length that keeps `keep` x the in-distribution score and stays above the baseline).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from posbench.config_loader import Checked, to_dict
from posbench.data.tasks import Example, GeneratedFiller, TaskConfig, get_task_class, task_names
from posbench.data.tasks.long_context import LongContextTask
from posbench.errors import ConfigError
from posbench.evaluation import eval_plots
from posbench.evaluation.effective_length import effective_length
from posbench.evaluation.evaluator import Evaluator, Session, Target
from posbench.evaluation.lengths import check_lengths
from posbench.evaluation.markdown import md_table, pct
from posbench.evaluation.retrieval import GridConfig, RetrievalGrid
from posbench.evaluation.suite_registry import SUITES
from posbench.evaluation.suites.algorithmic import pretrained_with_mix

DEMO_OFFSET = 1_000_000  # demonstration indices, far from the queries' 0..n-1
PAD_WORDS = 256  # words of generated filler that exact_length pads from (the gap is under one unit's tokens)
MEAN = "mean of families"


def families() -> list[str]:
    return [n for n in task_names() if issubclass(get_task_class(n), LongContextTask)]


@dataclass(frozen=True)
class LongContextConfig(Checked):
    # [] = the families the checkpoint was pretrained with (its data.mix), else every family with its defaults
    tasks: list[TaskConfig] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)  # [] = the evaluation's --lengths
    depths: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])
    n_samples: int = 8  # prompts per cell
    filler: Literal["auto", "task", "corpus"] = "auto"
    shots: int = 0  # demonstrations before each query, inside the length
    keep: float = 0.8  # effective length: the share of the in-distribution score a length must keep
    # pad each fitted prompt to exactly its length with generated filler after <|bos|> (less than one unit's
    # tokens), so a cell's prompts share one length and decode as one batch
    exact_length: bool = True

    def check(self) -> None:
        if self.n_samples < 1 or self.shots < 0 or not 0.0 < self.keep <= 1.0:
            raise ConfigError(f"long_context: need n_samples >= 1 (got {self.n_samples}), shots >= 0 (got "
                              f"{self.shots}) and keep in (0, 1] (got {self.keep})")
        if not self.depths or any(not 0.0 <= d <= 1.0 for d in self.depths):
            raise ConfigError(f"long_context.depths must be a non-empty list in [0, 1], got {self.depths}")
        check_lengths(self.lengths, "long_context.lengths")
        names = [t.name for t in self.tasks]
        wrong = [n for n in names if n not in families()]
        if wrong:
            raise ConfigError(f"long_context.tasks: {', '.join(wrong)} is not a long-context family; choose from "
                              + ", ".join(families()))
        if len(set(names)) != len(names):
            raise ConfigError(f"long_context.tasks lists a family twice: {names}")


@dataclass(frozen=True)
class FamilyConfig(GridConfig):
    task: TaskConfig = field(default_factory=lambda: get_task_class("niah_single").Config())

    @property
    def task_name(self) -> str:  # the grid checks its task against this: any family's task is this grid's
        return self.task.name


class FamilyGrid(RetrievalGrid):
    """One family's grid, its filler shared with the other families, `shots` demonstrations before each query."""

    name = "long_context"
    title = "long-context family"
    options = FamilyConfig

    def __init__(self, cfg: FamilyConfig, target: Target, shared: dict, shots: int, exact_length: bool):
        self.shared, self.demo_ids, self.exact_length = shared, [], exact_length
        super().__init__(cfg, target)
        tok = target.tokenizer
        if "pad" not in shared:  # neutral text ending at a word boundary: its last k tokens pad a prompt
            shared["pad"] = tok.encode(" ".join(GeneratedFiller().words(np.random.default_rng(0), PAD_WORDS)) + " ")
        longest = max(cfg.lengths or target.lengths)
        for j in range(shots):  # the same demonstrations for every query; no units: the format, in few tokens
            demo = self.task.example_at(target.seed, DEMO_OFFSET + j, 0, 0.5, "train")
            self.demo_ids += tok.encode(demo.text + "\n")
            if len(self.demo_ids) >= longest:  # before building more: shots=1e9 grew memory for ever
                raise ConfigError(f"long_context.shots={shots}: {j + 1} demonstrations of {cfg.task.name} already "
                                  f"take {len(self.demo_ids):,} tokens, the longest length evaluated ({longest:,}); "
                                  f"give fewer shots (they sit inside every length)")

    def load_filler(self):
        if "filler" not in self.shared:  # the corpus's filler text is decoded once for all families
            self.shared["filler"] = super().load_filler()
        return self.shared["filler"]

    def make_example(self, index: int, units: int, depth: float, seed: int) -> Example:
        return self.task.example_at(seed, index, units, depth)

    @property
    def dope_label(self) -> str:
        return f"{self.name}/{self.cfg.task.name}"

    def fit(self, index: int, L: int, depth: float, seed: int | None = None):
        fitted = super().fit(index, L, depth, seed)
        if fitted is None or not self.exact_length:
            return fitted
        ids, answer, n_new, units = fitted
        short = L - len(ids) - n_new
        pad = self.shared["pad"]
        while len(pad) < short:  # a gap longer than the pad text (a tokenizer with very long words): repeat it
            pad = pad + pad
        return [ids[0], *pad[len(pad) - short:], *ids[1:]] if short else ids, answer, n_new, units

    def encode(self, ex: Example) -> tuple[list[int], list[int]]:
        tok = self.target.tokenizer
        return [tok.bos_id, *self.demo_ids, *tok.encode(ex.prompt)], tok.encode(ex.answer)

    def cell_extra(self, depth: float, fitted: list) -> dict:
        infos = [self.make_example(i, f[3], depth, self.target.seed).info for i, f in enumerate(fitted)]
        chance = float(np.mean([i["chance"] for i in infos]))
        # a fixed answer scores the share of an answer that repeats; unique answers (7-digit values) give 0
        top = max(Counter(f[1] for f in fitted).values())
        commonest = top / len(fitted) if top > 1 else 0.0
        return {"chance": chance, "commonest": commonest, "baseline": max(chance, commonest),
                "guess": float(np.mean([i["guess"] for i in infos]))}


def blind_pick(value: float | None) -> str:
    """The question-blind pick as a report says it: n/a where every context held one candidate (the pick is then
    the retrieval itself, not a level to beat)."""
    return "n/a (one candidate in the context)" if value is not None and value >= 1.0 else pct(value)


def per_length(cells: list[dict], key: str) -> dict[str, float | None]:
    """Mean of `key` over a length's depths (None when any depth is n/a)."""
    out: dict[int, list] = {}
    for c in cells:
        out.setdefault(c["length"], []).append(c.get(key))
    return {str(L): None if any(v is None for v in vs) else float(np.mean(vs)) for L, vs in sorted(out.items())}


def na_by_length(cells: list[dict]) -> dict[int, str]:
    return {c["length"]: c["na"] for c in cells if c.get("na")}


@SUITES.register("long_context")
class LongContext(Evaluator):
    calibrates_dope = True  # each family's grid calibrates at each of its lengths (evaluation/retrieval.py)
    title = "Long-context probes (RULER families, lost in the middle): effective length, length x depth"
    options = LongContextConfig
    order = 5
    per_cell = "n_samples"
    generates = True  # greedy decoding with the KV cache: eval.py's memory check counts keys and values

    def __init__(self, cfg: LongContextConfig, target: Target):
        super().__init__(cfg, target)
        run = target.run_cfg
        mixed = [t for t in run.data.mix.tasks if t.name in families()] if pretrained_with_mix(run) else []
        configs = cfg.tasks or mixed or [get_task_class(n).Config() for n in families()]
        shared: dict = {}
        self.grids: dict[str, FamilyGrid] = {}
        for task_cfg in configs:
            depth_axis = get_task_class(task_cfg.name).depth_controlled
            grid_cfg = FamilyConfig(lengths=list(cfg.lengths), depths=list(cfg.depths) if depth_axis else [0.5],
                                    n_samples=cfg.n_samples, filler=cfg.filler, task=task_cfg)
            self.grids[task_cfg.name] = FamilyGrid(grid_cfg, target, shared, cfg.shots, cfg.exact_length)
        self.asked_as = "mix" if not cfg.tasks and mixed else "given" if cfg.tasks else "defaults"

    def work(self) -> int:
        return sum(g.work() for g in self.grids.values())

    def run(self, session: Session) -> dict:
        L_train, keep = self.target.train_len, self.cfg.keep
        fams = {}
        for name, grid in self.grids.items():
            res = grid.run(session)
            res["depth_axis"] = grid.task.depth_controlled
            res["task"] = to_dict(grid.task.cfg)
            for key in ("baseline", "guess", "chance", "commonest"):
                res[f"{key}_by_length"] = per_length(res["cells"], key)
            res["effective"] = effective_length(
                {int(L): v for L, v in res["by_length"].items()},
                {int(L): v for L, v in res["baseline_by_length"].items()}, L_train, keep, na_by_length(res["cells"]))
            fams[name] = res
        lengths = sorted({L for r in fams.values() for L in r["lengths"]})

        def mean_over(key: str) -> dict[str, float | None]:
            vals = {str(L): [r[key].get(str(L)) for r in fams.values()] for L in lengths}
            return {L: None if any(v is None for v in vs) else float(np.mean(vs)) for L, vs in vals.items()}

        mean = {"by_length": mean_over("by_length"), "baseline_by_length": mean_over("baseline_by_length")}
        na = {L: f"n/a for {', '.join(n for n, r in fams.items() if r['by_length'].get(str(L)) is None)}"
              for L in lengths if mean["by_length"][str(L)] is None}
        mean["effective"] = effective_length({L: mean["by_length"][str(L)] for L in lengths},
                                             {L: mean["baseline_by_length"][str(L)] for L in lengths}, L_train,
                                             keep, na)
        return {"train_len": L_train, "seed": self.target.seed, "shots": self.cfg.shots, "keep": keep,
                "n_samples": self.cfg.n_samples, "lengths": lengths, "asked_as": self.asked_as,
                "filler": next(iter(fams.values()))["filler"] if fams else None, "families": fams, "mean": mean}

    # -- report ----------------------------------------------------------------------------------------------
    @staticmethod
    def effective_text(eff: dict) -> str:
        """`512`, `>= 1024` when every tested length passed, or `n/a (why)`."""
        if eff["length"] is None:
            return f"n/a ({eff['na']})"
        open_ended = (eff.get("limit") or "").startswith("passes at every")
        return (">= " if open_ended else "") + str(eff["length"])

    @classmethod
    def headline(cls, result: dict) -> list[list[str]]:
        rows = []
        for name, res in [*result["families"].items(), (MEAN, result["mean"])]:
            eff = res["effective"]
            rows.append([name, cls.effective_text(eff), pct(eff["id_score"]), str(eff["id_length"] or "-"),
                         eff["limit"] or "-"])
        return rows

    @classmethod
    def markdown(cls, result: dict) -> str:
        shots = result["shots"]
        asked = {"mix": "the families it was pretrained with (data.mix), in the mix's format and options",
                 "given": "the families given in long_context.tasks", "defaults": "every family, default options"}
        parts = [f"{result['n_samples']} prompts per cell, filler: {result['filler']}, "
                 f"{'zero-shot' if not shots else f'{shots}-shot (demonstrations inside every length)'}; asked: "
                 f"{asked[result['asked_as']]}. Lengths up to {result['train_len']} tokens (the training length) are "
                 "in distribution.", "",
                 f"Effective length: the longest tested length whose score (exact match) keeps {result['keep']:.0%} "
                 "of the in-distribution score and stays above the baseline (chance or the commonest answer).", "",
                 md_table(["family", "effective length", "ID score", "ID length", "limited by"],
                          cls.headline(result)), "",
                 "Exact match by length, mean over depths (baseline: chance or commonest answer; question-blind "
                 "pick: a reader that finds the context's candidates and picks one without reading the question):",
                 ""]
        rows = []
        for name, res in result["families"].items():
            rows.append([name, *(f"{pct(res['by_length'].get(str(L)))} (baseline "
                                 f"{pct(res['baseline_by_length'].get(str(L)))}, question-blind pick "
                                 f"{blind_pick(res['guess_by_length'].get(str(L)))})" for L in result["lengths"])])
        parts += [md_table(["family", *map(str, result["lengths"])], rows), ""]
        for name, res in result["families"].items():
            if res["depth_axis"]:
                parts += [f"### {name}: length x depth of the relevant item", "", RetrievalGrid.markdown(res), ""]
        notes = sorted({f"- {name} {c['length']}: n/a, {c['na']}" for name, res in result["families"].items()
                        for c in res["cells"] if c.get("na")})
        return "\n".join(parts + notes).rstrip()

    @classmethod
    def comparison(cls, results: dict[str, dict]) -> str:
        names = list(dict.fromkeys([n for r in results.values() for n in r["families"]] + [MEAN]))

        def eff(res, name):
            got = res["mean"] if name == MEAN else res["families"].get(name)
            return "-" if got is None else cls.effective_text(got["effective"])

        parts = ["Effective length (tokens; keeps the stated share of the in-distribution score, above baseline):",
                 "", md_table(["family", *results], [[n, *(eff(r, n) for r in results.values())] for n in names]), ""]
        lengths = sorted({L for r in results.values() for L in r["lengths"]})
        for name in names[:-1]:
            rows = [[str(L), *(pct(r["families"][name]["by_length"].get(str(L))) if name in r["families"] else "-"
                               for r in results.values())] for L in lengths]
            parts += [f"{name}: exact match by length (mean over depths)", "",
                      md_table(["length", *results], rows), ""]
        return "\n".join(parts).rstrip()

    @classmethod
    def plots(cls, results: dict[str, dict], out_dir: Path) -> list[Path]:
        paths = []
        names = list(dict.fromkeys(n for r in results.values() for n in r["families"]))
        for name in names:
            have = {label: r["families"][name] for label, r in results.items() if name in r["families"]}
            first = next(iter(have.values()))
            same_axes = all(r["lengths"] == first["lengths"] and r["depths"] == first["depths"] for r in have.values())
            groups = [have] if same_axes else [{k: v} for k, v in have.items()]  # one figure per shared axes
            for i, group in enumerate(groups):
                res = next(iter(group.values()))
                suffix = "" if len(groups) == 1 else f"_{i}"
                ylabels = [f"{d:g}" for d in res["depths"]] if res["depth_axis"] else ["(spread)"]
                paths.append(eval_plots.heatmaps(out_dir / f"long_context_{name}_heatmap{suffix}.png",
                                                 {label: RetrievalGrid.grid(r) for label, r in group.items()},
                                                 [str(L) for L in res["lengths"]], ylabels, "context length (tokens)",
                                                 "depth of the relevant item" if res["depth_axis"] else "",
                                                 f"{name} (exact match)"))
        return paths
