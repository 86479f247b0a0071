"""The detached process that runs one app-started study: `python -m posbench.app.worker RUN_DIR`.

It takes the run directory's lock (another worker already holding it means the study is running: exit),
runs the study through the project's own runner, and records how it ended in status.json.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import traceback
from pathlib import Path

from posbench.app.app_paths import LOCK, PID, STATUS
from posbench.app.background import read_spec
from posbench.app.runner_files import write_pid
from posbench.fileio import open_append, write_text
from posbench.studies.study_runner import run_study


def _stop(signum, frame):
    """SIGTERM (the page's Stop) unwinds the worker like an exception: the process pool's `with` block shuts the
    pool down and the interpreter's finalizers release its semaphores, where dying by the signal left the
    resource tracker to report "leaked semaphore objects" in runner.log. status.json keeps the page's "stopped".

    Once only: `background.stop` signals again every 0.1 s until the process is gone, and a second SystemExit
    raised inside the pool's shutdown or an exit callback was "Exception ignored in atexit callback ...
    SystemExit: 143" in runner.log and cut that cleanup short. Later signals are ignored; SIGKILL after the
    grace period still ends a worker that hangs."""
    signal.signal(signum, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def main(run_dir: str) -> int:
    signal.signal(signal.SIGTERM, _stop)
    out = Path(run_dir)
    with open_append(out / LOCK) as lock:  # never through a link planted at runner.lock (LinkError)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("another worker is running this study; nothing to do", flush=True)
            return 0
        write_pid(out, os.getpid())
        try:
            result = run_study(read_spec(out), out, progress=False)
            status = {"state": "finished", "ran": result["ran"], "seconds": result["seconds"]}
        except Exception as e:  # recorded for the page, which shows it; the cells already done stay
            traceback.print_exc()
            status = {"state": "failed", "error": f"{type(e).__name__}: {e}"}
        write_text(out / STATUS, json.dumps(status))
        (out / PID).unlink(missing_ok=True)
    return 0 if status["state"] == "finished" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
