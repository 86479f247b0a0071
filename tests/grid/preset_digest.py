"""What every study and sweep preset expands to, as one digest per preset: each cell's id, row label, task, PE,
architecture and the RunConfig its settings load to (a study), each run's name and resolved RunConfig (a sweep).
`grid_presets.json` holds the digests made with the code before the arm grammar was shared; the test compares."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from posbench.config import RunConfig
from posbench.config_loader import load, to_dict
from posbench.studies.study_spec import expand, load_study
from posbench.sweeps.sweep_spec import load_sweep, plan_runs

ROOT = Path(__file__).resolve().parents[2]


def presets(kind: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / "configs" / kind).glob("*.yaml"))


def _sha(rows: list) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()[:16]


def study_digest(name: str) -> str:
    rows, loaded = [], {}
    for cell in expand(load_study(name)):
        settings = json.dumps(cell.settings, sort_keys=True, default=str)
        if settings not in loaded:  # cells share their settings across tasks and seeds: each loaded once
            loaded[settings] = _sha([to_dict(load(RunConfig, overrides=cell.settings))])
        rows.append([cell.cell_id, cell.label, to_dict(cell.task), to_dict(cell.pe), to_dict(cell.arch),
                     loaded[settings], to_dict(cell.study.train), to_dict(cell.study.eval)])
    return _sha(rows)


def sweep_digest(name: str) -> str:
    sweep = load_sweep(name)
    runs = plan_runs(sweep, Path("out"))
    return _sha([[r.name, r.size, r.pe, r.seed, r.budget, r.parent, r.group, to_dict(r.cfg)] for r in runs]
                + [to_dict(sweep.eval)])


if __name__ == "__main__":
    digests = {f"study/{n}": study_digest(n) for n in presets("study")}
    digests.update({f"sweep/{n}": sweep_digest(n) for n in presets("sweep")})
    (Path(__file__).with_name("grid_presets.json")).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
