"""The worker's files as the app reads them (app/runner_files.py): a runner.pid left behind whose number now
belongs to an unrelated process never reads as running (the pid is recorded with its process's start time, and a
bare pid must be the worker's command line); a damaged runner.pid or status.json is one error naming the file; a
cell file past its bound is refused before it is read."""

import json
import os
import subprocess
import sys

import pytest

from posbench.app import background
from posbench.app.outputs import NotAnOutput, read_cells
from posbench.app.runner_files import process_start, recorded_pid
from posbench.app.studyform import build_study
from posbench.config_loader import to_dict
from posbench.errors import DataError
from tests.app.helpers import TINY


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "tiny"
    run.mkdir()
    (run / "spec.json").write_text(json.dumps(to_dict(build_study(TINY)), sort_keys=True, indent=1))
    return run


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_a_stale_pid_of_an_unrelated_live_process_is_not_running(run, sleeper):
    for pid in (os.getpid(), sleeper.pid):
        (run / "runner.pid").write_text(str(pid))  # a bare pid, as written before start times were recorded
        assert background.state(run).state == "stopped", pid
        # the worker's record, its number since reused: same pid, another start time
        (run / "runner.pid").write_text(json.dumps({"pid": pid, "start": process_start(pid) - 1}))
        assert recorded_pid(run) is None and background.state(run).state == "stopped", pid
        assert background.stop(run) is False
    assert sleeper.poll() is None  # left alone


def test_the_recorded_worker_reads_as_running_until_its_pid_is_reused(run):
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "posbench.app.worker", str(run)],
                              start_new_session=True)
    try:
        (run / "runner.pid").write_text(json.dumps({"pid": worker.pid, "start": process_start(worker.pid)}))
        assert background.state(run).state == "running"
        (run / "runner.pid").write_text(json.dumps({"pid": worker.pid, "start": process_start(worker.pid) + 7}))
        assert background.state(run).state == "stopped"
    finally:
        worker.kill()
        worker.wait()


@pytest.mark.parametrize("text", ["not json {", "[1, 2]", '{"state": 5}', '{"state": "finished", "error": [1]}'])
def test_a_damaged_status_file_is_one_error_naming_it(run, text):
    (run / "status.json").write_text(text)
    with pytest.raises(DataError, match="status.json: .*Move it aside") as e:
        background.state(run)
    assert str(run / "status.json") in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("text", ["twelve", '{"pid": "12"}', '{"pid": -4, "start": 1}', "1e400"])
def test_a_damaged_pid_file_is_one_error_naming_it(run, text):
    (run / "runner.pid").write_text(text)
    with pytest.raises(DataError, match="runner.pid: not a pid file the app wrote"):
        background.state(run)


def test_an_oversized_pid_file_or_cell_is_refused_before_it_is_read(run):
    with open(run / "runner.pid", "wb") as f:
        f.truncate(1 << 30)  # sparse: no disk spent
    with pytest.raises(DataError, match="runner.pid: .* bytes is more than a pid file holds"):
        background.state(run)
    (run / "runner.pid").unlink()
    (run / "cells").mkdir()
    with open(run / "cells" / "k_back_rope_s0.json", "wb") as f:
        f.truncate(1 << 30)
    with pytest.raises(NotAnOutput, match="k_back_rope_s0.json: .* bytes is more than a study cell holds"):
        read_cells(run)
