"""The worker's small files, written and read in this one place: runner.pid (which process is the worker) and
status.json (how it ended). Both are read bounded and without following a link (fileio.read_text_bounded), and
validated: a damaged one is a DataError naming the file, which the page shows as one line.

A pid alone does not name a process for long: once the worker is gone the kernel hands its number to the next
process, and a runner.pid left behind (a killed worker, a reboot) would read as "running" for as long as that
unrelated process lives. So runner.pid records the pid with the process's start time (/proc/<pid>/stat field 22,
clock ticks since boot), and a pid counts as the worker only while a process of that number started at that time.
"""

from __future__ import annotations

import json
from pathlib import Path

from posbench.app.app_paths import PID, STATUS
from posbench.errors import DataError, brief
from posbench.fileio import read_text_bounded, write_text

MAX_SMALL_BYTES = 64 << 10  # runner.pid, status.json (an error message and a few numbers)
STATES = ("finished", "failed", "stopped")  # what status.json may say (the worker's end, or a stop from the page)


def process_start(pid: int) -> int | None:
    """The start time of live process `pid` (clock ticks since boot; /proc/<pid>/stat field 22), None when there is
    no such process or it is a zombie (dead, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the parenthesised name (which may hold spaces): field 3 on
    return None if fields[0] == "Z" else int(fields[19])


def write_pid(run_dir: Path, pid: int) -> None:
    write_text(Path(run_dir) / PID, json.dumps({"pid": pid, "start": process_start(pid)}))


def recorded_pid(run_dir: Path) -> int | None:
    """The pid runner.pid names when that very process still runs (same number, same start time); None when there is
    no runner.pid or its process has ended, its number perhaps reused since. A runner.pid holding a bare pid (written
    before start times were recorded) names no start time: the caller checks the command line. DataError naming the
    file when it is neither."""
    path = Path(run_dir) / PID
    try:
        text = read_text_bounded(path, MAX_SMALL_BYTES, "a pid file").strip()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if type(data) is int:  # a bare pid
        data = {"pid": data, "start": None}
    if not (isinstance(data, dict) and type(data.get("pid")) is int and data["pid"] > 0
            and (data.get("start") is None or type(data["start"]) is int)):
        raise DataError(f"{path}: not a pid file the app wrote (it holds {brief(text, 60)}); move it aside: the study "
                        "then reads as stopped, and Resume starts it again")
    started = process_start(data["pid"])
    if started is None or (data["start"] is not None and started != data["start"]):
        return None
    return data["pid"]


def read_status(run_dir: Path) -> dict:
    """status.json as {"state": one of STATES, "error": text, ...}; {} when there is none. DataError naming the file
    when it is not that (damaged, or not ours)."""
    path = Path(run_dir) / STATUS
    try:
        text = read_text_bounded(path, MAX_SMALL_BYTES, "a status file")
    except FileNotFoundError:
        return {}
    try:
        status = json.loads(text)
    except ValueError as e:
        why = f"not JSON ({e})"
    else:
        if not isinstance(status, dict):
            why = f"a JSON {type(status).__name__}, not an object"
        elif status.get("state") not in STATES:
            why = f"`state` is {brief(status.get('state'), 40)}, not one of {', '.join(STATES)}"
        elif not isinstance(status.get("error", ""), str):
            why = "`error` is not text"
        else:
            return status
    raise DataError(f"{path}: {why}; the study's worker writes it when it ends. Move it aside (the study then reads "
                    "as stopped, and Resume starts it again)")
