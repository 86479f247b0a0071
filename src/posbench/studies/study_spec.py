"""A study: a grid of (task x PE x seed [x any config field]) cells, as a typed, strictly loaded YAML.

    name: quickstart
    tasks: [{name: k_back, k: 3}, {name: modular_sum}]
    pes: [{name: rope}, {name: alibi}]
    seeds: [0, 1, 2]                                     # or {start: 3, max: 10, step: 1}: sequential seeds
    overrides: [model.d_model=128, model.n_heads=4]       # dotted RunConfig overrides for every cell
    vary: {model.n_layers: [1, 4, 16], study.train.steps: [100, 300]}   # extra grid axes
    arms:                                                   # rows that are not a decoder PE (model.arch)
      - {label: mamba, arch: {name: mamba}, run: {model: {n_layers: 4}}}
      - {label: encdec_nope, pe: {name: sinusoidal}, arch: {name: encoder_decoder, decoder_pe: {name: none}},
         tasks: [reverse]}
      - {label: no_pad, pe: {name: coupled}, task: {pad: false}}   # the tasks with one option changed

Rows of the grid are `pes` (the decoder-only transformer with that PE) followed by `arms` (grid/arm.py, the grammar
a sweep's rows share): an arm fixes an architecture with its PE (and run settings of its own) under a label, so
rows that are not a product (Mamba takes no PE; the encoder-decoder's decoder PE is its own axis)
sit in the same table, seeds and report.
An arm with `tasks` runs only on those tasks (the encoder-decoder needs a task with a source/target form); an
arm with `task` options runs its tasks with those options changed (an ablation of a format element).
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from posbench.config import load_preset
from posbench.config_loader import Checked, load, nested, to_dict
from posbench.data.tasks.ruler_mix import RulerMix
from posbench.data.tasks.task import TaskConfig, get_task_class
from posbench.errors import ConfigError, brief
from posbench.grid.arm import Arm
from posbench.model.arch import ArchConfig, DecoderArch
from posbench.pe import PEConfig
from posbench.studies.claims import ClaimConfig, check_names
from posbench.studies.length_grid import LengthGridConfig
from posbench.studies.sequential import SequentialSeeds, split_seeds

METRICS = ("id_acc", "ood_beyond_acc", "ood_acc", "ood_within_acc", "id_loss", "ood_loss", "gap")  # per cell
# what a claim may compare: the per-cell metrics, and exact match (every answer token right, teacher-forced: greedy
# decoding's exact match), what the arithmetic papers report
CLAIM_METRICS = (*METRICS, "id_exact", "ood_exact")


@dataclass
class StudyTrain(Checked):
    steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    warmup_frac: float = 0.05
    decay_frac: float = 0.2
    curve_points: int = 6  # checkpoints evaluated for the learning curves

    def check(self) -> None:
        if self.steps < 2 or self.batch_size < 1 or not self.lr > 0 or self.curve_points < 1:
            raise ConfigError("study.train needs steps >= 2, batch_size >= 1, lr > 0, curve_points >= 1")


@dataclass
class StudyEval(Checked):
    n_examples: int = 256  # per split (id, ood), the same examples for every cell: seeds are paired
    seed: int = 1234
    success_threshold: float = 0.9  # a seed "succeeds" when its accuracy reaches this
    confidence: float = 0.95
    n_boot: int = 10000
    # exact match per (family, length, depth) at multiples of the training length (studies/length_grid.py)
    length_grid: LengthGridConfig = field(default_factory=LengthGridConfig)

    def check(self) -> None:
        if self.n_examples < 1 or not 0 < self.confidence < 1 or self.n_boot < 100:
            raise ConfigError("study.eval needs n_examples >= 1, 0 < confidence < 1, n_boot >= 100")


@dataclass
class StudyConfig(Checked):
    name: str = "study"
    tasks: list[TaskConfig] = field(default_factory=list)
    pes: list[PEConfig] = field(default_factory=list)
    # a list: every row gets these seeds; {start, max, step}: sequential seeds (studies/sequential.py), moved to
    # `sequential` when loaded, with `seeds` the grid's every possible seed, 0 .. max - 1
    seeds: list[int] | SequentialSeeds = field(default_factory=lambda: [0, 1, 2])
    overrides: list[str] = field(default_factory=list)
    vary: dict[str, Any] = field(default_factory=dict)
    arms: list[Arm] = field(default_factory=list)
    train: StudyTrain = field(default_factory=StudyTrain)
    eval: StudyEval = field(default_factory=StudyEval)
    workers: int = 2
    # keep each cell's final checkpoint in <study>/checkpoints/<cell_id> (the app's Try page opens it); off: a
    # cell's training run is deleted once it is scored (a study of 60 cells would otherwise keep 60 model copies)
    keep_checkpoints: bool = False
    # published numbers to put beside ours: {task: {pe: {id: acc, ood: acc}}}
    reference: dict[str, Any] = field(default_factory=dict)
    reference_note: str = ""
    # published orderings judged on our seeds (studies/claims.py), each ending in a verdict line
    claims: list[ClaimConfig] = field(default_factory=list)
    sequential: SequentialSeeds | None = None  # set from `seeds: {start, max, step}`; None: fixed seeds

    def check(self) -> None:
        self.seeds, self.sequential = split_seeds(self.seeds, self.sequential, "study")
        if not self.tasks or not (self.pes or self.arms) or not self.seeds:
            raise ConfigError("a study needs at least one task, one PE (or arm) and one seed")
        if any(s < 0 for s in self.seeds):  # the task sources' seeds: refused here, before any cell's files exist
            raise ConfigError(f"study.seeds must be integers >= 0, got {brief(self.seeds)}")
        names = {t.name for t in self.tasks}
        for arm in self.arms:
            unknown = sorted(set(arm.tasks) - names)
            if unknown:
                raise ConfigError(f"study.arms `{arm.label}`: tasks {unknown} are not in the study's tasks "
                                  f"{sorted(names)}")
            # the changed options are checked before any cell trains
            for task in filter(lambda t: runs_on(arm, t), self.tasks):
                arm_task(arm, task)
            if arm.dope is not None and arm.dope.calibration_seed == self.eval.seed:
                raise ConfigError(f"study.arms `{arm.label}`: dope.calibration_seed {self.eval.seed} is study.eval.seed"
                                  ", so DoPE would calibrate on the examples it scores; give it another seed")
        for key, values in self.vary.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(f"study.vary.{key} must be a non-empty list of values")
        if self.workers < 1:
            raise ConfigError("study.workers must be >= 1")
        not_mixed = [n for n in names if not issubclass(get_task_class(n), RulerMix)]
        if self.eval.length_grid.active and not_mixed:
            raise ConfigError(f"study.eval.length_grid scores the long-context families of a `ruler_mix` task; "
                              f"tasks {sorted(not_mixed)} have none (drop length_grid or those tasks)")
        pes, tasks = [row.label for row in self.rows()], [t.name for t in self.tasks]
        for claim in self.claims:
            check_names(claim.names, pes, f"claim `{claim.order}`", "PE")
            check_names(claim.tasks, tasks, f"claim `{claim.order}`", "task")
            if claim.metric not in CLAIM_METRICS:
                raise ConfigError(f"claim `{claim.order}`: metric `{claim.metric}` is not one of {CLAIM_METRICS}")


    def rows(self) -> list[Arm]:
        """Every row of the grid: one decoder arm per entry of `pes` (labelled by the PE), then `arms`. A PE listed
        more than once (an ablation of its options) labels each entry by the options it changes from the PE's
        defaults (`rope`, `rope_theta500`), so its rows and cells stay apart."""
        counts = Counter(pe.name for pe in self.pes)
        labels = [pe.name if counts[pe.name] == 1 else options_label(pe) for pe in self.pes]
        for label, n in Counter(labels).items():
            if n > 1:
                raise ConfigError(f"study.pes lists PE `{label}` twice with the same options: change an option of "
                                  f"one, or drop it")
        return [Arm(label, pe) for label, pe in zip(labels, self.pes)] + list(self.arms)


def options_label(pe: PEConfig) -> str:
    """The PE's name and each option it sets away from its defaults, e.g. `rope_theta500`, `rope_factor4`."""
    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
        return out
    own, default = flat(to_dict(pe)), flat(to_dict(type(pe)()))
    changed = [(k.split(".")[-1], v) for k, v in own.items() if v != default.get(k)]
    text = lambda v: f"{v:g}" if isinstance(v, float) else str(v)
    return pe.name + "".join(f"_{k}{text(v)}" for k, v in changed)


@dataclass
class Cell:
    task: TaskConfig
    pe: PEConfig
    seed: int
    axes: dict[str, Any]  # the `vary` values of this cell
    study: StudyConfig  # with study.* axes applied
    arm: Arm | None = None  # None: the decoder-only transformer with `pe`

    @property
    def label(self) -> str:
        """The row's name in reports: the PE's name, or the arm's label."""
        return self.arm.label if self.arm is not None else self.pe.name

    @property
    def arch(self) -> ArchConfig:
        return self.arm.arch if self.arm is not None else DecoderArch()

    @property
    def cell_id(self) -> str:
        extra = "".join(f"_{k.split('.')[-1]}{v}" for k, v in sorted(self.axes.items()))
        return f"{self.task.name}_{self.label}{extra}_s{self.seed}"

    @property
    def run_axes(self) -> dict[str, Any]:
        """The `vary` values of this cell that set RunConfig fields (the `study.*` ones are in `study`)."""
        return {k: v for k, v in self.axes.items() if not k.startswith("study.")}

    @property
    def overrides(self) -> list[str]:
        """This cell's RunConfig overrides as text, for reading (a report, a test); `settings` is what is
        applied."""
        own = self.arm.text() if self.arm is not None else []
        return self.study.overrides + own + [f"{k}={v}" for k, v in self.run_axes.items()]

    @property
    def settings(self) -> list[str | dict]:
        """What the cell applies to its RunConfig: the dotted text the study author wrote (parsed once, by
        the loader), the row's own `run` mapping, then each `vary` value at its key as the typed value it
        already is."""
        own = [self.arm.run] if self.arm is not None and self.arm.run else []
        return [*self.study.overrides, *own, *(nested(k, v) for k, v in self.run_axes.items())]


def load_study(path_or_preset: str) -> StudyConfig:
    return load_preset("study", path_or_preset, StudyConfig, "study")


def shrink_for_smoke(study: StudyConfig) -> StudyConfig:
    """The same grid of tasks x PEs, one seed, a few steps and examples: it exercises every code path of a
    study (training, scoring, statistics, report, plots) in seconds, so CI can run the README's quickstart
    command as written (`--smoke` or POSBENCH_STUDY_SMOKE=1). Its numbers mean nothing, so it gets its own
    output directory."""
    study.name = f"{study.name}_smoke"
    study.seeds, study.sequential = study.seeds[:1], None  # one seed: nothing to look at twice
    study.train.steps, study.train.curve_points = 20, 2
    study.eval.n_examples, study.eval.n_boot = 16, 200
    return study


def _with_study_axes(study: StudyConfig, axes: dict) -> StudyConfig:
    """The study with its `study.*` axes applied, rebuilt through the strict loader: a value is typed and
    checked like one in the study file, and an unknown key names the nearest valid one."""
    own = [nested(key.split(".", 1)[1], value) for key, value in axes.items() if key.startswith("study.")]
    if not own:
        return copy.deepcopy(study)
    try:
        return load(StudyConfig, overrides=own, base=to_dict(study), where="study")
    except ConfigError as e:
        raise ConfigError(f"study.vary: {e}") from None


def runs_on(arm: Arm, task: TaskConfig) -> bool:
    """The row runs on `task`: it lists no tasks of its own, or lists this one."""
    return not arm.tasks or task.name in arm.tasks


def arm_task(arm: Arm, task: TaskConfig) -> TaskConfig:
    """`task` with the arm's task options, rebuilt through the strict loader (an unknown option names the
    nearest valid one; a value is checked like one in the study's `tasks`)."""
    if not arm.task:
        return task
    if "name" in arm.task:
        raise ConfigError(f"study.arms `{arm.label}`: task options cannot change the task's name; list another "
                          "task in the study's `tasks` (and the arm's `tasks`) instead")
    return load(type(task), overrides=[nested(k, v) for k, v in arm.task.items()], base=to_dict(task),
                where=f"study.arms `{arm.label}`.task")


def expand(study: StudyConfig) -> list[Cell]:
    keys = sorted(study.vary)
    cells = []
    for values in itertools.product(*(study.vary[k] for k in keys)):
        axes = dict(zip(keys, values))
        sub = _with_study_axes(study, axes)
        for task in study.tasks:
            for arm in filter(lambda a: runs_on(a, task), study.rows()):
                row_task = arm_task(arm, task)  # once per row, not per seed: it goes through the strict loader
                cells += [Cell(row_task, arm.pe, seed, axes, sub, arm) for seed in study.seeds]
    ids = [c.cell_id for c in cells]
    if len(set(ids)) != len(ids):
        raise ConfigError("two cells of the study have the same id (duplicate task/PE/arm label/seed entries?)")
    return cells
