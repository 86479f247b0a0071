"""A sweep: a typed, strictly loaded YAML expanded into one RunConfig per run (and per WSD branch).

    name: cpu_demo
    sizes: [nano]                                  # model presets, configs/model/<size>.yaml
    pes: [{name: rope}, {name: alibi}]             # any registered PE with its options
    arms:                                          # labelled rows: a PE with run settings of their own
      - {label: rope_gated, pe: {name: rope}, run: {model: {attention_gate: elementwise}}}
    seeds: [0, 1]                                  # or {start: 3, max: 10, step: 1}: sequential seeds
    run:                                           # a train.py config mapping applied to every run
      data: {source: {name: local, paths: [...]}, tokenizer: {name: bytes}}
      train: {target_budgets: [2.0e6], budget_unit: tokens}
    vary: {model.d_model: [128, 192]}              # extra axes: dotted RunConfig key -> values
    eval: {suites: [ppl, algorithmic], algorithmic: {n_examples: 64}}   # eval.py options (SweepEval: EvalConfig's)

Every run's RunConfig is built here, typed, before anything trains: an unknown key or a bad value in any
run stops the sweep at once with the nearest valid name. Settings travel as mappings merged into the
typed config (never re-rendered as `key=value` text). An arm is a row that is more than a PE (a recipe:
model options with its PE; grid/arm.py, the grammar studies share): its `run` mapping is merged over the sweep's
`run` for that row only, and its label names the row, its runs and the claims about it. The largest budget of
`train.target_budgets` is the run itself; each smaller one is a branch run that finishes that budget's decay from the
branch checkpoint. With sequential seeds (the study's `SequentialSeeds`, sweeps/sweep_sequential.py) the plan holds
every run a row may reach, seeds 0 .. max - 1; the looks choose which of them train.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posbench.config import RunConfig, preset_path
from posbench.config_loader import Checked, load, nested, to_dict
from posbench.errors import ConfigError, brief
from posbench.evaluation.eval_config import EvalConfig
from posbench.grid.arm import Arm
from posbench.pe import PEConfig
from posbench.studies.claims import ClaimConfig, check_names
from posbench.studies.sequential import SequentialSeeds, split_seeds
from posbench.training.plan import budget_tokens, make_plan
from posbench.training.rundir import check_run_name, format_tokens
from posbench.yaml_io import load_yaml

SWEEP_CLAIM_METRICS = ("ppl_slope", "first_token_mass")  # what a sweep's claims can compare (sweep_report.py)


@dataclass
class SweepEval(EvalConfig):
    """eval.py's options for every final checkpoint, typed when the spec loads (a misspelt key names the nearest one
    before any run starts). One default of its own: no progress bars per checkpoint (the sweep draws one over them)."""

    progress: bool = False


@dataclass
class SweepConfig(Checked):
    name: str = "sweep"
    extends: str = ""  # a sweep preset (or YAML file) this one is merged over (load_sweep)
    sizes: list[str] = field(default_factory=lambda: ["nano"])
    pes: list[PEConfig] = field(default_factory=list)
    arms: list[Arm] = field(default_factory=list)
    # a list: every row gets these seeds; {start, max, step}: sequential seeds (studies/sequential.py), moved to
    # `sequential` when loaded, with `seeds` every seed a row may get, 0 .. max - 1
    seeds: list[int] | SequentialSeeds = field(default_factory=lambda: [0])
    run: dict[str, Any] = field(default_factory=dict)
    vary: dict[str, Any] = field(default_factory=dict)
    eval: SweepEval = field(default_factory=SweepEval)
    eval_branches: bool = True  # evaluate the branch runs' final checkpoints too
    workers: int = 1  # runs trained (then evaluated) at once on this machine, cores/workers threads each
    # published orderings judged on our seeds (studies/claims.py); metric: one of SWEEP_CLAIM_METRICS
    claims: list[ClaimConfig] = field(default_factory=list)
    confidence: float = 0.95
    n_boot: int = 10000
    sequential: SequentialSeeds | None = None  # set from `seeds: {start, max, step}`; None: fixed seeds

    def check(self) -> None:
        self.seeds, self.sequential = split_seeds(self.seeds, self.sequential, "sweep")
        if self.sequential is not None and not self.claims:  # the report judges claims only, no pair table
            raise ConfigError(f"sweep.seeds {{start, max, step}}: sequential seeds give a row more seeds while a "
                              f"claim about it is undecided, and this sweep has no `claims`: add claims, or give a "
                              f"seed list such as {list(range(self.sequential.start))}")
        if not self.sizes or not (self.pes or self.arms) or not self.seeds:
            raise ConfigError("a sweep needs at least one size, one PE (or arm) and one seed")
        for arm in self.arms:
            arm.check_pretraining("sweep.arms")
        if len(set(self.row_names)) != len(self.row_names):
            raise ConfigError(f"sweep rows {self.row_names} name one row twice: give each arm a label of its own")
        for key, values in self.vary.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(f"sweep.vary.{key} must be a non-empty list of values")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"sweep.seeds lists a seed twice: {self.seeds}")
        if self.workers < 1:
            raise ConfigError(f"sweep.workers={self.workers} must be >= 1")
        for claim in self.claims:
            check_names(claim.names, self.row_names, f"claim `{claim.order}`", "PE")
            if claim.metric not in SWEEP_CLAIM_METRICS:
                raise ConfigError(f"claim `{claim.order}`: metric `{claim.metric}` is not one of a sweep's "
                                  f"{SWEEP_CLAIM_METRICS}")
        if not 0 < self.confidence < 1 or self.n_boot < 100:
            raise ConfigError("sweep needs 0 < confidence < 1 and n_boot >= 100")

    @property
    def rows(self) -> list[Arm]:
        """Every row: each PE as an arm labelled by its name with no settings of its own, then the arms."""
        return [Arm(label=p.name, pe=p) for p in self.pes] + list(self.arms)

    @property
    def row_names(self) -> list[str]:
        return [row.label for row in self.rows]


@dataclass
class Run:
    """One training run of the sweep: its typed config and where it sits in the grid."""

    name: str
    cfg: RunConfig
    size: str
    pe: str
    seed: int
    axes: dict[str, Any]
    budget: str  # the budget as run names write it (tokens)
    parent: str = ""  # for a branch run: the run whose branch checkpoint it continues

    @property
    def group(self) -> str:
        """Runs that differ only in the seed: one row of the comparison."""
        return f"{self.size} {self.budget}" + (f" {_axes_text(self.axes)}" if self.axes else "")


def _axes_text(axes: dict) -> str:
    return " ".join(f"{k.split('.')[-1]}={axis_label(v)}" for k, v in sorted(axes.items()))


MAX_EXTENDS = 8  # presets stacked by `extends`: more is a mistake (or a cycle), not a design


def _sweep_file(path_or_preset: str, beside: Path | None = None) -> Path:
    """A preset name (no suffix) or a YAML file; a relative file named by `extends` is read beside the file that
    names it (`beside`), as an include is, not from wherever the command runs (a child silently merged over
    a file of the same name in the working directory)."""
    path = Path(path_or_preset)
    if not path.suffix:
        return preset_path("sweep", path_or_preset)
    return beside / path if beside is not None and not path.is_absolute() else path


def load_sweep(path_or_preset: str) -> SweepConfig:
    """A sweep preset or file; `extends: <preset or file>` merges it over another sweep (nested mappings merge,
    everything else replaces), so a variant states only what it changes (cpu_demo_packing: cpu_demo + a vary). A
    relative file in `extends` is relative to the extending file."""
    files = [_sweep_file(path_or_preset)]
    layers = [load_yaml(files[0])]  # each file read once, the parent's first: merged left to right below
    while (parent := layers[0].get("extends")):
        if not isinstance(parent, str):
            raise ConfigError(f"{files[0]}: extends must be a sweep preset name or a YAML file, got {brief(parent)}")
        parent_file = _sweep_file(parent, beside=files[0].parent)
        if parent_file.resolve() in {f.resolve() for f in files} or len(files) > MAX_EXTENDS:
            raise ConfigError(f"{files[0]}: `extends: {parent}` makes a cycle or a chain of more than {MAX_EXTENDS} "
                              "sweeps; extend a preset that does not extend this one")
        files.insert(0, parent_file)
        layers.insert(0, load_yaml(parent_file))
    return load(SweepConfig, overrides=layers, where="sweep")


def axis_label(value: Any) -> str:
    """A varied value as run names and report rows write it: a mapping as `key-value+key-value`."""
    if isinstance(value, dict):
        return "+".join(f"{k}-{axis_label(v)}" for k, v in sorted(value.items()))
    return str(value)


def _base_value(base: RunConfig, key: str) -> Any:
    """What the run's config holds at a dotted key without the sweep's `vary` (a mapping for a sub-config)."""
    value = base
    for part in key.split("."):
        value = getattr(value, part, None)
    return to_dict(value) if hasattr(value, "__dataclass_fields__") else value


def _is_base(value: Any, base: Any) -> bool:
    """A varied value that leaves the run as it is without `vary` (a mapping: every key it sets)."""
    if isinstance(value, dict) and isinstance(base, dict):
        return all(k in base and _is_base(v, base[k]) for k, v in value.items())
    return value == base


def _run_name(size: str, pe: str, axes: dict, seed: int, base: RunConfig) -> str:
    """Each varied axis adds `_<last key><value>`, except a value the run has anyway without `vary`: the baseline
    runs of a vary sweep keep the names (and identities) of the sweep without it, so pointing both at one --out
    trains them once (cpu_demo_packing reuses cpu_demo's runs)."""
    extra = "".join(f"_{k.split('.')[-1]}{'-' if isinstance(v, dict) else ''}{axis_label(v)}"
                    for k, v in sorted(axes.items()) if not _is_base(v, _base_value(base, k)))
    return check_run_name(f"{size}_{pe}{extra}_s{seed}")


def plan_runs(sweep: SweepConfig, out_dir: Path) -> list[Run]:
    """Every run of the sweep in order (a main run, then its branch runs), configs typed and resolved."""
    keys = sorted(sweep.vary)
    runs: list[Run] = []
    for size, values, row, seed in itertools.product(sweep.sizes, itertools.product(*(sweep.vary[k] for k in keys)),
                                                     sweep.rows, sweep.seeds):
        axes = dict(zip(keys, values))
        preset = load_yaml(preset_path("model", size))
        # the size preset, then typed mappings in order: the same loader as train.py's
        common = [copy.deepcopy(sweep.run), copy.deepcopy(row.run), {"pe": to_dict(row.pe), "seed": seed}]
        try:
            base = load(RunConfig, overrides=copy.deepcopy(common), base=copy.deepcopy(preset)) if axes else None
            name = _run_name(size, row.label, axes, seed, base)
            settings = [*common, *(nested(key, value) for key, value in axes.items()),
                        {"train": {"out_dir": str(out_dir / "checkpoints"), "run_name": name, "resume": "auto"}}]
            cfg = load(RunConfig, overrides=settings, base=preset).resolve()
        except ConfigError as e:
            raise ConfigError(f"sweep run {size}_{row.label}_s{seed} ({_axes_text(axes)}): {e}") from None
        plan = make_plan(cfg, 1, "cpu")  # budgets and batch arithmetic checked now, before any run starts
        main = Run(name, cfg, size, row.label, seed, axes, format_tokens(plan.budgets[-1]))
        runs.append(main)
        for value in sorted(set(cfg.train.target_budgets))[:-1]:
            tokens = budget_tokens(cfg, value, plan.n_params)
            branch = copy.deepcopy(cfg)
            branch.train.run_name = f"{name}_b{format_tokens(tokens)}"
            branch.train.branch_from = str(out_dir / "checkpoints" / name / f"branch_{format_tokens(tokens)}")
            branch.train.budget = value
            runs.append(Run(branch.train.run_name, branch, size, row.label, seed, axes, format_tokens(tokens), name))
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ConfigError("two runs of the sweep have the same name (duplicate size/PE/seed entries?)")
    return runs
