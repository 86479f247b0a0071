"""Studies in detached background processes, so the page never blocks and a refresh or a closed tab
neither kills nor duplicates a run.

A run directory holds the study's spec (spec.json), the runner's usual outputs (cells/, logs/, work/,
results.json, ...) and the worker's lock, pid, log and final status. The worker holds an exclusive
flock on runner.lock while it runs: the kernel releases it when the process dies, so "running" never
goes stale, and a second start on the same directory finds it held and exits without work. A stopped
run is resumed by starting it again: the study runner skips the cells already written.

`stop` ends a run from the page: the worker leads its own process group (a new session), and the cell
processes its pool spawns are in that group, so one signal to the group ends them all. A cell is written
atomically when it finishes, so a stop keeps every finished cell and loses only the cells in training,
which the next start runs again from scratch.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from posbench.app.app_paths import LOCK, LOG, PID, SPEC, START_LOCK, STATUS
from posbench.app.runner_files import process_start, read_status, recorded_pid, write_pid
from posbench.config_loader import from_dict, to_dict
from posbench.errors import BadInputError, user_paths
from posbench.fileio import open_append, open_read, read_text_bounded, write_text
from posbench.studies.cell_files import cell_path
from posbench.studies.study_spec import StudyConfig, expand

# the app's own files are read without following a link and bounded (fileio): a run directory may sit on shared
# storage, where a planted link could make the page read, or the worker write, someone else's file
MAX_SPEC_BYTES = 1 << 20  # spec.json: a StudyConfig is a few KB (runner.pid and status.json: runner_files.py)


class StudyNameTaken(BadInputError, FileExistsError):
    """The study name the user chose is the directory of another study (a FileExistsError as it always was)."""


@dataclass
class RunState:
    state: str  # running | finished | failed | stopped (killed or never finished: start again to resume)
    done: int  # finished cells
    total: int
    error: str = ""


def read_spec(run_dir: Path) -> StudyConfig:
    return from_dict(StudyConfig, json.loads(read_text_bounded(Path(run_dir) / SPEC, MAX_SPEC_BYTES, "a study spec")),
                     "study")


def is_running(run_dir: Path) -> bool:
    """True while a worker holds the run's lock (tried without blocking, released at once)."""
    path = Path(run_dir) / LOCK
    if not os.path.lexists(path):
        return False
    with open_read(path) as f:  # a link at runner.lock: LinkError, never a lock taken on its target
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def start(study: StudyConfig, run_dir: Path) -> bool:
    """Start (or resume) `study` in `run_dir` in a detached process; False when it is already running.

    A directory that already holds a different study is refused: its finished cells belong to that one. Atomic
    against another Start of the same name (two tabs at once): the directory is created exclusively (os.mkdir),
    and the check of its spec, the spec's writing and the worker's start happen under an exclusive lock on its
    start.lock, so one Start starts the study and the other finds it there (running, or another study: refused)."""
    run_dir = Path(run_dir)
    with user_paths(f"study directory {run_dir}"):
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(run_dir)
        except FileExistsError:
            if run_dir.is_symlink() or not run_dir.is_dir():
                raise StudyNameTaken(f"{run_dir} exists and is not a study directory; choose another name") from None
    with open_append(run_dir / START_LOCK) as lock:  # never through a link planted there (LinkError)
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this raises
        # compared as typed configs: a spec.json written before a setting existed holds its default
        if os.path.lexists(run_dir / SPEC) and json.dumps(to_dict(read_spec(run_dir)), sort_keys=True) != \
                json.dumps(to_dict(study), sort_keys=True):
            raise StudyNameTaken(f"{run_dir} already holds another study; choose another name")
        if _active(run_dir):
            return False
        write_text(run_dir / SPEC, json.dumps(to_dict(study), sort_keys=True, indent=1))
        (run_dir / STATUS).unlink(missing_ok=True)
        with open_append(run_dir / LOG, "ab") as log:
            # a new session: the worker is not in the page server's process group, so stopping or reloading
            # the server, or a closed tab, does not signal it
            proc = subprocess.Popen([sys.executable, "-m", "posbench.app.worker", str(run_dir)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)
        write_pid(run_dir, proc.pid)  # "running" from now on, before the worker takes its lock
    # the page server is the worker's parent: a thread waits for its exit status, so a study that finishes on its
    # own does not stay <defunct> under the server for as long as the server runs
    threading.Thread(target=proc.wait, name=f"reap-worker-{proc.pid}", daemon=True).start()
    return True


STOP_GRACE_S = 10.0  # after SIGTERM, how long the run's processes get before SIGKILL


def stop(run_dir: Path, grace_s: float = STOP_GRACE_S) -> bool:
    """End the run's worker and its cell processes (SIGTERM to the worker's process group, SIGKILL to what
    is left after `grace_s`) and wait until they are gone; records the run as stopped. False when no worker
    of this run directory is running (a pid that now belongs to another process is left alone)."""
    run_dir = Path(run_dir)
    pid = _worker_pid(run_dir)
    if pid is None:
        return False
    write_text(run_dir / STATUS, json.dumps({"state": "stopped", "error": "stopped from the page"}))
    deadline = time.monotonic() + grace_s
    sig = signal.SIGTERM
    while members := _group_members(pid):
        for member in members:  # by pid, not killpg: only the live members of this run's group
            try:
                os.kill(member, sig)
            except ProcessLookupError:
                pass
        _reap(pid)
        time.sleep(0.1)
        if time.monotonic() > deadline:
            sig = signal.SIGKILL
    _reap(pid)
    (run_dir / PID).unlink(missing_ok=True)
    return True


def _worker_pid(run_dir: Path) -> int | None:
    """The pid in runner.pid when it is this run's live worker: the process that number had when it was recorded
    (runner_files.py: a reused pid is another process) running `python -m posbench.app.worker RUN_DIR`."""
    pid = recorded_pid(run_dir)
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0") if pid else []
    except OSError:  # ended meanwhile
        return None
    if "posbench.app.worker" not in args[:-2]:
        return None
    return pid if Path(args[args.index("posbench.app.worker") + 1]).resolve() == run_dir.resolve() else None


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group `pgid`, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:  # state, ppid, pgrp
            found.append(int(entry.name))
    return found


def _reap(pid: int) -> None:
    """Collect the worker's exit status when this process started it (the page server), so it leaves no
    zombie behind; anyone else's child is not ours to wait for."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def state(run_dir: Path) -> RunState:
    run_dir = Path(run_dir)
    cells = expand(read_spec(run_dir))
    done = sum(cell_path(run_dir, c).is_file() for c in cells)
    if _active(run_dir):
        return RunState("running", done, len(cells))
    status = read_status(run_dir)  # DataError naming the file when damaged
    if status.get("state") in ("finished", "failed"):
        return RunState(status["state"], done, len(cells), status.get("error", ""))
    return RunState("stopped", done, len(cells))


def _active(run_dir: Path) -> bool:
    """A worker holds the lock, or was started a moment ago and has not taken it yet (runner.pid names it: the
    same process, not a later one given its number)."""
    return is_running(run_dir) or _worker_pid(run_dir) is not None


def _alive(pid: int) -> bool:
    """A live process (a zombie, dead but not yet reaped by the page server that started it, is not)."""
    return process_start(pid) is not None


def app_runs(root: Path) -> list[Path]:
    """Run directories under `root` that the app started, newest first."""
    if not Path(root).is_dir():
        return []
    return sorted((p for p in Path(root).iterdir() if (p / SPEC).is_file()), key=lambda p: -(p / SPEC).stat().st_mtime)
