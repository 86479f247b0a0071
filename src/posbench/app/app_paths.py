"""Where the app keeps the studies it starts, and the files of one app-started study directory."""

from __future__ import annotations

import os
from pathlib import Path

RUNS_ENV = "POSBENCH_APP_RUNS"
SPEC = "spec.json"  # the StudyConfig the run was started with (to_dict), written before the worker starts
START_LOCK = "start.lock"  # flock-ed while a Start checks the directory and starts the worker: one Start at a time
LOCK = "runner.lock"  # flock-ed by the worker for as long as it runs: the one truth about "running"
PID = "runner.pid"
STATUS = "status.json"  # {"state": "finished" | "failed", "error": ...}, written by the worker at its end
LOG = "runner.log"


def runs_root() -> Path:
    return Path(os.environ.get(RUNS_ENV, "runs/app")).resolve()
