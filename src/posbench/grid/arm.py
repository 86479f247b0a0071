"""One labelled row of a grid, the same grammar in a study and in a sweep.

    - {label: rope_gated, pe: {name: rope}, run: {model: {attention_gate: elementwise}}}
    - {label: mamba, arch: {name: mamba}, run: {model: {n_layers: 4}}, tasks: [reverse]}      # a study's

`run` (a train.py config mapping merged over the grid's own settings for this row) is the canonical form: values
travel typed, never re-rendered as text. `overrides: [model.n_layers=4]` (dotted text, a study's older spelling)
is still read, converted to `run` by the loader's own parser with a one-line note on stderr. `tasks` and `task`
are a study's (which tasks the row runs, task options it changes); a sweep's rows are pretraining runs and refuse
them. The label names the row's cell files and run directories: letters, digits, `_`, `-` and `.`, starting with a
letter or digit, the rule studies had (their labels such as `alibi_x0.25` name finished cells) and a superset of
the sweeps' (letters, digits, `_`), so every existing label stays valid.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

from posbench.config_loader import Checked, deep_merge, parse_override
from posbench.errors import ConfigError
from posbench.evaluation.dope_config import DopeConfig
from posbench.model.arch import ArchConfig, DecoderArch
from posbench.pe import PES, PEConfig
from posbench.pe.hybrid import HybridPerLayer
from posbench.pe.none import NoPE
from posbench.pe.rope import RotaryBase
from posbench.pe.rope_scaling import ScalingConfig
from posbench.pe.wrapper import WrapperPE


def overrides_as_run(overrides: list[str]) -> dict[str, Any]:
    """Dotted text (`model.n_layers=4`) as the mapping `run` holds, parsed as a run's text overrides are, in order."""
    return reduce(deep_merge, (parse_override(text) for text in overrides), {})


def run_as_text(run: dict[str, Any], prefix: str = "") -> list[str]:
    """`run` as dotted text, for reading (a report, a test): {model: {n_layers: 4}} -> [model.n_layers=4]."""
    out = []
    for key, value in run.items():
        is_section = isinstance(value, dict) and "name" not in value  # a registered variant is one value
        out += run_as_text(value, f"{prefix}{key}.") if is_section else [f"{prefix}{key}={value}"]
    return out


@dataclass
class Arm(Checked):
    """One labelled row: an architecture, its PE (the encoder's for encoder_decoder) and run settings of its own."""

    label: str = ""
    pe: PEConfig = field(default_factory=NoPE.Config)
    arch: ArchConfig = field(default_factory=DecoderArch)
    run: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)  # the older spelling: moved into `run` when the arm is built
    tasks: list[str] = field(default_factory=list)  # a study's: only these tasks (empty: every task of the study)
    # a study's: task options this row changes, on every task it runs (e.g. {pad: false}): one element of a recipe
    # removed, the rest of the row's grid kept, so an ablation is a row of the same table
    task: dict[str, Any] = field(default_factory=dict)
    # a study's evaluation-time options for this row's cells, as `posbench eval`'s --rope-scaling and --dope: the row
    # trains as it would without them (a row equal to another but for these trains once with it, studies/cell.py)
    rope_scaling: ScalingConfig | None = None
    dope: DopeConfig | None = None  # DoPE (evaluation/dope.py), calibrated at each scored split and grid length

    def check(self) -> None:
        # a dot is allowed (`alibi_x0.25`: an option's value), not first (a hidden file, `..`)
        if not self.label[:1].isalnum() or not self.label.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise ConfigError(f"arms: label {self.label!r} must be a name of letters, digits, `_`, `-` and `.`, "
                              f"starting with a letter or digit (it names the row's cells and runs)")
        # a wrapper or per-layer hybrid may hold a rotary PE: the cell checks its built model before it trains
        rotary = issubclass(PES.get(self.pe.name), RotaryBase | WrapperPE | HybridPerLayer)
        for key, why in (("dope", "denoises"), ("rope_scaling", "rescales")):
            if getattr(self, key) is not None and not rotary:
                raise ConfigError(f"arms `{self.label}`: `{key}` {why} rotary position embeddings and the row's PE "
                                  f"is `{self.pe.name}`; give the arm a rotary PE (rope, ...) or drop `{key}`")
        if self.overrides:
            if self.run:
                raise ConfigError(f"arms `{self.label}`: give its settings once, as `run:` (a mapping), not both "
                                  "`run:` and `overrides:`")
            self.run, self.overrides = overrides_as_run(self.overrides), []
            print(f"note: arms `{self.label}`: `overrides:` is read as `run: {self.run}` (write `run:`, the form "
                  "studies and sweeps share)", file=sys.stderr)

    def check_pretraining(self, where: str) -> None:
        """A sweep's row: a pretraining run has no task list or task options, and sets its architecture in `run`."""
        if self.tasks or self.task or self.arch != DecoderArch() or self.dope is not None \
                or self.rope_scaling is not None:
            raise ConfigError(f"{where} `{self.label}`: `tasks`, `task`, `arch`, `rope_scaling` and `dope` are a "
                              "study's row settings; a sweep's runs pretrain, set the architecture in `run: {model: "
                              "{arch: ...}}` (evaluation options in the sweep's `eval:`)")

    def text(self) -> list[str]:
        """The row's own settings as dotted text, for reading."""
        return run_as_text(self.run)


def spec_form(arm: Arm | None) -> dict | None:
    """An arm as a study cell's spec records it (studies/cell_files.cell_spec): the fields it sets that a spec
    has always held, so an arm without task options or run settings keeps the spec it had before those existed."""
    if arm is None:
        return None
    from posbench.config_loader import to_dict

    out = to_dict(arm)  # `overrides` stays, always [] once built (its text is in `run`): the spec had it
    for key in ("task", "run", "rope_scaling", "dope"):
        if not out[key]:
            del out[key]
    return out


def migrate_spec(spec: dict) -> dict:
    """A recorded cell spec whose arm kept its settings as dotted text (`overrides`, before `run` was the one form)
    in the form `spec_form` writes now, so a finished cell is recognised as the same cell (in place, returned)."""
    arm = spec.get("arm")
    if isinstance(arm, dict) and arm.get("overrides"):
        arm["run"], arm["overrides"] = overrides_as_run(arm["overrides"]), []
    return spec
