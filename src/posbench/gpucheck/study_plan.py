"""gpu_check studies --plan: which studies at how many seeds fit one call, measured on the device.

The presets whose verdicts are undecided at the CPU's seed counts come first (`PAYOFF`): the quickstart at 20
seeds, then the 2024-2026 zoo, the long-context preset and MQAR at 10. Before each study a probe trains its first
row at the asked seeds as one batched group (studies/batched_train.py) for a tenth of its steps, and times it;
its cells' CPU phases (`cell.CpuPhases`) split that time into training and row generation, which scale with the
steps, and the rest (start-up, scoring), which does not (`seed_seconds`). `plan` then gives each study, in order,
the most seeds between its floor and its ask that fit the seconds left, and skips one that cannot reach its floor,
saying how long it would need. The caller plans again before every study with the seconds really left, so time a
study did not use goes to the next. The estimate assumes one process at a time (workers sharing the device only
make the study finish early, never late).

Shape of the arithmetic (all seconds): a study at n seeds costs start_s + n x seed_s, where seed_s is its R rows'
cells and its tasks' tables of training rows (one per (task, seed), shared by every row).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

PROBE_FRACTION = 10  # the probe trains steps / PROBE_FRACTION steps of the study's schedule ...
PROBE_MIN_STEPS = 20  # ... and at least this many (a smoke study's 20 steps: the probe is the study's row)
START_S = 20.0  # seconds a study command spends before its first cell trains: interpreter, CUDA context, rows


@dataclass(frozen=True)
class Ask:
    study: str  # preset name or study YAML
    seeds: int  # the seeds asked for
    min_seeds: int  # fewer decide no more than the CPU did: skipped instead

    @property
    def name(self) -> str:
        return Path(self.study).stem


PAYOFF = (Ask("quickstart", 20, 10), Ask("pe_zoo", 10, 10), Ask("long_context", 10, 10), Ask("mqar", 10, 10))


def parse_ask(text: str) -> Ask:
    """`study:seeds:min_seeds` (`quickstart:20:10`), for argparse: a bad one is a one-line usage error."""
    parts = text.rsplit(":", 2)
    try:
        seeds, floor = int(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r}: give study:seeds:min_seeds, e.g. quickstart:20:10") from None
    if not 1 <= floor <= seeds:
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 <= min_seeds <= seeds")
    return Ask(parts[0], seeds, floor)


@dataclass(frozen=True)
class Pick:
    ask: Ask
    seeds: int  # 0: skipped (`reason`)
    seconds: float  # planned: START_S + seeds x rows x cell_s
    reason: str = ""


def plan(asks: list[Ask], seed_s: dict[str, float], budget_s: float, start_s: float = START_S) -> list[Pick]:
    """Each ask in order gets min(its seeds, the seeds that fit the seconds left); below its floor it is skipped
    with the seconds its floor would need. `seed_s`: one seed's seconds of each study, by `Ask.study`."""
    picks, left = [], budget_s
    for a in asks:
        n = min(a.seeds, math.floor((left - start_s) / seed_s[a.study])) if left > start_s else 0
        if n < a.min_seeds:
            need = start_s + a.min_seeds * seed_s[a.study]
            picks.append(Pick(a, 0, 0.0, f"{a.min_seeds} seeds need {need:.0f} s, {max(left, 0):.0f} s left"))
            continue
        cost = start_s + n * seed_s[a.study]
        left -= cost
        picks.append(Pick(a, n, cost))
    return picks


def seed_seconds(wall_s: float, seeds: int, phases: dict[str, float], step_ratio: float, rows: int,
                 tasks: int) -> float:
    """One seed's seconds of a study of `rows` rows and `tasks` tasks at its full steps, from a probe of one row
    at `seeds` seeds that trained 1/step_ratio of the steps in `wall_s`. Per cell: its training share (of the
    cells' CPU phases) scaled by `step_ratio`, start-up and scoring as they were; per task, one table of rows
    (its generation share, scaled too: a table holds steps x batch rows). No phases: all of it is training."""
    total = sum(phases.values())
    train, table = (phases.get("train", 0.0) / total, phases.get("rows", 0.0) / total) if total > 0 else (1.0, 0.0)
    per_cell = wall_s / seeds
    return rows * per_cell * (train * step_ratio + 1.0 - train - table) + tasks * per_cell * table * step_ratio


@dataclass(frozen=True)
class Probe:
    rows: int
    seed_s: float  # one seed of the whole study at its full steps (`seed_seconds`)
    wall_s: float
    steps: int  # the probe's steps, of `full_steps`
    full_steps: int


def probe(ask: Ask, device: str, smoke: bool, scratch: Path) -> Probe:
    """Train the study's first row at the asked seeds as one batched group for a tenth of its steps, into
    `scratch` (its cells are not the study's: other steps), and time it."""
    from posbench.studies.cell_files import cpu_path
    from posbench.studies.study_runner import run_study
    from posbench.studies.study_spec import expand, load_study, shrink_for_smoke

    shutil.rmtree(scratch, ignore_errors=True)  # an earlier probe's cells may have had other steps
    study = load_study(ask.study)
    if smoke:
        study = shrink_for_smoke(study)
    study.seeds, study.sequential = [0], None  # the probe times seeds as asked: fixed ones
    rows = len(expand(study))
    study.seeds = list(range(ask.seeds))
    full = study.train.steps
    study.train.steps = min(full, max(PROBE_MIN_STEPS, full // PROBE_FRACTION))
    if device != "cpu":
        study.overrides = [*study.overrides, f"train.device={device}"]
    t0 = time.perf_counter()
    run_study(study, scratch, workers=1, progress=False, limit=ask.seeds, batch_seeds=True)
    wall = time.perf_counter() - t0
    phases: dict[str, float] = {}
    for cell in expand(study)[:ask.seeds]:
        for phase, s in json.loads(cpu_path(scratch, cell).read_text())["seconds"].items():
            phases[phase] = phases.get(phase, 0.0) + s
    seed_s = seed_seconds(wall, ask.seeds, phases, full / study.train.steps, rows, len(study.tasks))
    return Probe(rows, seed_s, wall, study.train.steps, full)
