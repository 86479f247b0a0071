"""The run page's form values -> a typed StudyConfig through the project's strict loader, with every
check the runner would make (task fields, PE names, cell ids) done before anything starts, and what the
study would cost on this machine (`estimate`), shown before it starts."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from posbench.config_loader import from_dict, parse_override, to_dict
from posbench.cpu_speed import matmul_rate
from posbench.data.tasks.task import build_task
from posbench.errors import ConfigError
from posbench.procpool import usable_cores
from posbench.studies.cell_config import cell_config
from posbench.studies.study_spec import StudyConfig, expand, load_study

DIMS = ("d_model", "n_heads", "n_layers", "d_ff")  # model fields the form sets; other overrides are kept
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
    if not name or any(c in name for c in "/\\") or name.startswith("."):
        raise ConfigError(f"study name `{name}`: needs a plain name (it names the run directory)")
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


# The quickstart as this project measured it (docs/performance.md, "The quickstart study": `bench_study.py`, 2-core
# AMD EPYC, one thread per cell process): the train phase did 36.56 TFLOP (6 x params x tokens) in 645.2 CPU-seconds
# and everything else of a cell (rows, scoring, start-up, report) 84.9 CPU-seconds over its 60 cells, while one
# thread's fp32 matmul at the study model's shape ran at REFERENCE_MATMUL. Another machine scales both by its own
# rate at that shape (`machine_speed`): the work is the same mix of matmuls and elementwise passes.
REFERENCE_MATMUL = 116.9e9  # FLOP/s, 1024x128 @ 128x384, one thread
TRAIN_FLOP_PER_CPU_S = 36.56e12 / 645.2
OTHER_CPU_S_PER_CELL = 84.9 / 60


@functools.lru_cache(maxsize=1)
def machine_speed() -> float:
    """This machine's one-thread matmul rate at the study model's shape over the reference's (best of 10 timings of
    0.3 GFLOP: ~40 ms, measured once per process; fewer read up to 20% low in a cold process)."""
    return matmul_rate(1024, 128, 384, repeats=10, flop_per_timing=3e8) / REFERENCE_MATMUL


@dataclass
class CostEstimate:
    cells: int  # in the grid
    todo: int  # not finished yet in the run directory (a resumed study skips the others)
    train_flop: float  # 6 x params x training tokens, summed over the cells to run
    processes: int  # cell processes running at once: the study's workers, at most one per core
    minutes: float  # wall minutes at the measured rate, approximate
    flop_per_cpu_s: float  # the training rate assumed on this machine
    load: float | None = None  # the 1-minute load average when estimated (None: unknown on this platform)

    def text(self) -> str:
        done = f" ({self.cells - self.todo} already finished here are skipped)" if self.todo < self.cells else ""
        tera = self.train_flop >= 1e11
        flop = f"{self.train_flop / 1e12:.2f} TFLOP" if tera else f"{self.train_flop / 1e9:.2f} GFLOP"
        wall = f"about {self.minutes:.0f} min" if self.minutes >= 1 else f"about {60 * self.minutes:.0f} s"
        return (f"{self.cells} cells{done}: {flop} of training (6 x params x tokens), "
                f"{wall} on {self.processes} of this machine's {usable_cores()} cores "
                f"(approximate: the quickstart's measured rate scaled by this machine's matmul speed, "
                f"{self.flop_per_cpu_s / 1e9:.0f} GFLOP of training per CPU-second, docs/performance.md; it "
                "assumes an idle machine" + self._load_text() + ")")

    def _load_text(self) -> str:
        """The load now, so a reader can see the estimate's assumption does not hold (cores shared: longer)."""
        if self.load is None:
            return ""
        busy = self.load + self.processes > usable_cores()  # other work wants cores the study's processes need
        return (f": the load average now is {self.load:.1f} on {usable_cores()} cores"
                + (", so expect it to take longer" if busy else ""))


_PARAMS: dict[str, int] = {}  # (model, PE) config -> parameter count, kept for the page server's life


def estimate(study: StudyConfig, run_dir: Path | None = None) -> CostEstimate:
    """What starting `study` costs on this machine, before it starts: cells to run and wall minutes."""
    from posbench.model.flops import model_stats
    from posbench.studies.study_runner import cell_path

    cells = expand(study)
    todo = [c for c in cells if run_dir is None or not cell_path(run_dir, c).is_file()]
    flop_per_token: dict[tuple, tuple[float, int]] = {}  # the seeds of a (task, row, axes) share a model
    total = 0.0
    for cell in todo:
        key = (cell.task.name, repr(cell.task), cell.label, repr(sorted(cell.axes.items())))
        if key not in flop_per_token:
            cfg = cell_config(cell, build_task(cell.task), Path("work"))
            shape = repr((cfg.model, cfg.pe))  # what the parameter count depends on
            if shape not in _PARAMS:  # a page rerun (every widget change) must not build the models again
                _PARAMS[shape] = model_stats(cfg.model, cfg.pe, "cpu").params_total
            flop_per_token[key] = (6.0 * _PARAMS[shape], cfg.train.global_batch_tokens)
        per_token, tokens_per_step = flop_per_token[key]
        total += per_token * tokens_per_step * cell.study.train.steps
    processes = max(1, min(study.workers, usable_cores(), len(todo) or 1))
    speed = machine_speed()
    cpu_s = (total / TRAIN_FLOP_PER_CPU_S + OTHER_CPU_S_PER_CELL * len(todo)) / speed
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform
        load = None
    return CostEstimate(len(cells), len(todo), total, processes, cpu_s / processes / 60, TRAIN_FLOP_PER_CPU_S * speed,
                        load)
