"""The run page's form values -> a typed StudyConfig through the project's strict loader, with every
check the runner would make (task fields, PE names, cell ids) done before anything starts. What the study would
cost on this machine is `study_runner.estimate_text`, the line `posbench study --estimate` prints, from the grid's
one estimator (grid/estimate.py) that the study and sweep commands print before their first cell."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from posbench.config_loader import from_dict, parse_override, to_dict
from posbench.data.tasks.task import build_task
from posbench.errors import ConfigError, clip
from posbench.studies.cell_config import cell_config
from posbench.studies.study_spec import StudyConfig, expand, load_study

DIMS = ("d_model", "n_heads", "n_layers", "d_ff")  # model fields the form sets; other overrides are kept
# a study's name is its run directory's: ASCII that every file system and URL takes as is, far below NAME_MAX (255
# bytes), so a 300-character name is refused here and never reaches mkdir as `File name too long`
MAX_NAME = 100
NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{MAX_NAME - 1}}}")
ARM_EXAMPLE = "{label: rope_theta500, pe: {name: rope, theta: 500}}"


def defaults() -> dict:
    """The form's starting values: the quickstart study."""
    q = load_study("quickstart")
    model = {}
    for text in q.overrides:
        model.update(parse_override(text).get("model", {}))
    flow = lambda t: yaml.safe_dump(to_dict(t), default_flow_style=True, sort_keys=False).strip()
    return {"name": q.name, "tasks": "\n".join(flow(t) for t in q.tasks),
            "pes": [p.name for p in q.pes], "seeds": ", ".join(map(str, q.seeds)), "steps": q.train.steps,
            "batch_size": q.train.batch_size, "lr": q.train.lr, "workers": q.workers,
            **{d: int(model[d]) for d in DIMS if d in model},
            "other_overrides": [o for o in q.overrides if o.split("=")[0].split(".")[-1] not in DIMS]}


def parse_tasks(text: str, field: str = "tasks", example: str = "{name: k_back, k: 3}") -> list[dict]:
    """One task (or, `field` arms, one arm) per line as a YAML mapping (`{name: k_back, k: 3}`); blank lines
    skipped."""
    tasks = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = yaml.safe_load(line)
        except yaml.YAMLError as e:
            raise ConfigError(f"{field}, line {n}: not a YAML mapping ({str(e).splitlines()[0]})") from None
        if not isinstance(value, dict):
            raise ConfigError(f"{field}, line {n}: expected a mapping like {example}, got `{line.strip()}`")
        tasks.append(value)
    return tasks


def parse_seeds(text: str) -> list[int]:
    try:
        return [int(s) for s in text.replace(",", " ").split()]
    except ValueError:
        raise ConfigError(f"seeds: `{text}` is not a list of integers (e.g. `0, 1, 2`)") from None


def build_study(form: dict) -> StudyConfig:
    """Raises ConfigError naming the field at fault."""
    name = str(form["name"]).strip()
    if not NAME.fullmatch(name):
        raise ConfigError(f"study name `{clip(name, 40)}`: use 1 to {MAX_NAME} letters, digits, `_`, `-` or `.`, "
                          "starting with a letter or digit (it names the run directory and the page's address)")
    overrides = list(form.get("other_overrides", [])) + [f"model.{d}={int(form[d])}" for d in DIMS]
    study = from_dict(StudyConfig, {
        "name": name, "tasks": parse_tasks(form["tasks"]), "pes": [{"name": p} for p in form["pes"]],
        # arms: labelled rows with their own PE options (an ablation), one YAML mapping per line
        "arms": parse_tasks(form.get("arms", ""), "arms", ARM_EXAMPLE),
        "seeds": parse_seeds(form["seeds"]), "overrides": overrides, "workers": int(form["workers"]),
        "keep_checkpoints": bool(form.get("keep_checkpoints", False)),
        "train": {"steps": int(form["steps"]), "batch_size": int(form["batch_size"]), "lr": float(form["lr"])},
        **({"eval": form["eval"]} if form.get("eval") else {})}, "study")
    for cell in expand(study):  # expand: duplicate cells; cell_config: each cell's task and model config
        if cell.seed == study.seeds[0]:  # the other seeds differ only in the seed
            cell_config(cell, build_task(cell.task), Path("work"))
    return study
