"""A study: a grid of (task x PE x seed [x any config field]) cells, as a typed, strictly loaded YAML.

    name: quickstart
    tasks: [{name: k_back, k: 3}, {name: modular_sum}]
    pes: [{name: rope}, {name: alibi}]
    seeds: [0, 1, 2]
    overrides: [model.d_model=128, model.n_heads=4]       # dotted RunConfig overrides for every cell
    vary: {model.n_layers: [1, 4, 16], study.train.steps: [100, 300]}   # extra grid axes
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any

from posbench.config import load_preset
from posbench.config_loader import ConfigError
from posbench.data.tasks.base import TaskConfig
from posbench.pe import PEConfig
from posbench.studies.claims import ClaimConfig, check_names

METRICS = ("id_acc", "ood_beyond_acc", "ood_acc", "ood_within_acc", "id_loss", "ood_loss", "gap")  # per cell

@dataclass
class StudyTrain:
    steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    warmup_frac: float = 0.05
    decay_frac: float = 0.2
    curve_points: int = 6  # checkpoints evaluated for the learning curves

    def __post_init__(self):
        if self.steps < 2 or self.batch_size < 1 or not self.lr > 0 or self.curve_points < 1:
            raise ConfigError("study.train needs steps >= 2, batch_size >= 1, lr > 0, curve_points >= 1")


@dataclass
class StudyEval:
    n_examples: int = 256  # per split (id, ood), the same examples for every cell: seeds are paired
    seed: int = 1234
    success_threshold: float = 0.9  # a seed "succeeds" when its accuracy reaches this
    confidence: float = 0.95
    n_boot: int = 10000

    def __post_init__(self):
        if self.n_examples < 1 or not 0 < self.confidence < 1 or self.n_boot < 100:
            raise ConfigError("study.eval needs n_examples >= 1, 0 < confidence < 1, n_boot >= 100")


@dataclass
class StudyConfig:
    name: str = "study"
    tasks: list[TaskConfig] = field(default_factory=list)
    pes: list[PEConfig] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    overrides: list[str] = field(default_factory=list)
    vary: dict[str, Any] = field(default_factory=dict)
    train: StudyTrain = field(default_factory=StudyTrain)
    eval: StudyEval = field(default_factory=StudyEval)
    workers: int = 2
    # published numbers to put beside ours: {task: {pe: {id: acc, ood: acc}}}
    reference: dict[str, Any] = field(default_factory=dict)
    reference_note: str = ""
    # published orderings judged on our seeds (studies/claims.py), each ending in a verdict line
    claims: list[ClaimConfig] = field(default_factory=list)

    def __post_init__(self):
        if not self.tasks or not self.pes or not self.seeds:
            raise ConfigError("a study needs at least one task, one PE and one seed")
        for key, values in self.vary.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(f"study.vary.{key} must be a non-empty list of values")
        if self.workers < 1:
            raise ConfigError("study.workers must be >= 1")
        pes, tasks = [p.name for p in self.pes], [t.name for t in self.tasks]
        for claim in self.claims:
            check_names(claim.names, pes, f"claim `{claim.order}`", "PE")
            check_names(claim.tasks, tasks, f"claim `{claim.order}`", "task")
            if claim.metric not in METRICS:
                raise ConfigError(f"claim `{claim.order}`: metric `{claim.metric}` is not one of {METRICS}")


@dataclass
class Cell:
    task: TaskConfig
    pe: PEConfig
    seed: int
    axes: dict[str, Any]  # the `vary` values of this cell
    study: StudyConfig  # with study.* axes applied

    @property
    def cell_id(self) -> str:
        extra = "".join(f"_{k.split('.')[-1]}{v}" for k, v in sorted(self.axes.items()))
        return f"{self.task.name}_{self.pe.name}{extra}_s{self.seed}"

    @property
    def overrides(self) -> list[str]:
        return self.study.overrides + [f"{k}={v}" for k, v in self.axes.items() if not k.startswith("study.")]


def load_study(path_or_preset: str) -> StudyConfig:
    return load_preset("study", path_or_preset, StudyConfig, "study")


def _with_study_axes(study: StudyConfig, axes: dict) -> StudyConfig:
    out = copy.deepcopy(study)
    for key, value in axes.items():
        if key.startswith("study."):
            *parents, leaf = key.split(".")[1:]
            target = out
            for p in parents:
                target = getattr(target, p)
            if not hasattr(target, leaf):
                raise ConfigError(f"study.vary: unknown key `{key}`")
            setattr(target, leaf, type(getattr(target, leaf))(value))
    return out


def expand(study: StudyConfig) -> list[Cell]:
    keys = sorted(study.vary)
    cells = []
    for values in itertools.product(*(study.vary[k] for k in keys)):
        axes = dict(zip(keys, values))
        sub = _with_study_axes(study, axes)
        for task in study.tasks:
            for pe in study.pes:
                for seed in study.seeds:
                    cells.append(Cell(task, pe, seed, axes, sub))
    ids = [c.cell_id for c in cells]
    if len(set(ids)) != len(ids):
        raise ConfigError("two cells of the study have the same id (duplicate task/PE/seed entries?)")
    return cells
