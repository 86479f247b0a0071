"""A study in a detached worker: one worker per run directory, state read from the directory alone,
finished cells never re-run, a killed run resumes."""

import json
import os
import signal
import time

import pytest

from posbench.app import background
from posbench.app.studyform import build_study, defaults
from tests.app.helpers import TINY


def wait_for(run_dir, states, timeout=300):
    deadline = time.time() + timeout
    while (s := background.state(run_dir)).state not in states:
        assert time.time() < deadline, s
        time.sleep(0.2)
    return s


def test_form_defaults_are_the_quickstart():
    d = defaults()
    assert d["pes"] == ["sinusoidal", "learned", "rope", "alibi", "none"] and d["seeds"] == "0, 1, 2, 3, 4"
    assert (d["steps"], d["batch_size"], d["lr"], d["d_model"], d["n_heads"], d["n_layers"], d["d_ff"]) == \
        (300, 64, 3e-3, 128, 4, 2, 256)
    study = build_study({**d, "seeds": "0"})
    assert [t.name for t in study.tasks] == ["k_back", "modular_sum", "shift_invariant", "long_range_match"]
    assert study.tasks[0].k == 3 and "model.dropout=0.1" in study.overrides


@pytest.mark.slow
def test_one_worker_and_no_rerun(tmp_path):
    run = tmp_path / "tiny"
    study = build_study(TINY)
    assert background.start(study, run) is True
    assert background.start(study, run) is False  # a second start (another tab, a refresh) attaches
    assert wait_for(run, {"running"}).total == 2
    s = wait_for(run, {"finished", "failed"})
    assert (s.state, s.done, s.total) == ("finished", 2, 2), (run / "runner.log").read_text()
    stamps = {p.name: p.stat().st_mtime_ns for p in (run / "cells").glob("*.json")}
    assert background.start(study, run) is True  # start again: the runner skips both finished cells
    wait_for(run, {"finished"})
    assert json.loads((run / "status.json").read_text())["ran"] == 0
    assert stamps == {p.name: p.stat().st_mtime_ns for p in (run / "cells").glob("*.json")}
    with pytest.raises(FileExistsError, match="another study"):
        background.start(build_study({**TINY, "steps": 5}), run)


@pytest.mark.slow
def test_a_worker_that_finishes_is_reaped_not_left_defunct(tmp_path):
    """The page server is the worker's parent: a study that ends on its own must not stay <defunct> under it."""
    run = tmp_path / "tiny"
    background.start(build_study(TINY), run)
    worker = json.loads((run / "runner.pid").read_text())["pid"]
    assert wait_for(run, {"finished", "failed"}).state == "finished", (run / "runner.log").read_text()
    deadline = time.time() + 10
    while os.path.exists(f"/proc/{worker}"):  # a zombie keeps its /proc entry until its parent waits for it
        state = open(f"/proc/{worker}/stat").read().rsplit(")", 1)[1].split()[0]
        assert time.time() < deadline, f"worker {worker} still in state {state} after it finished"
        time.sleep(0.1)


@pytest.mark.slow
def test_killed_worker_shows_stopped_and_resumes(tmp_path):
    run = tmp_path / "tiny"
    background.start(build_study({**TINY, "steps": 60}), run)
    deadline = time.time() + 300  # the worker imports torch before it takes the lock: slow on a busy machine
    while not background.is_running(run):
        assert time.time() < deadline
        time.sleep(0.1)
    os.killpg(json.loads((run / "runner.pid").read_text())["pid"], signal.SIGKILL)
    s = wait_for(run, {"stopped"}, timeout=30)
    assert s.done < 2
    background.start(background.read_spec(run), run)
    assert wait_for(run, {"finished", "failed"}).state == "finished"


@pytest.mark.slow
def test_stop_keeps_finished_cells_and_a_resume_skips_them(tmp_path):
    run = tmp_path / "six"
    study = build_study({**TINY, "name": "six", "pes": ["rope", "learned", "alibi", "none", "sinusoidal", "t5"],
                         "workers": 2, "steps": 400})  # cells long enough that the stop lands mid-run
    background.start(study, run)
    deadline = time.time() + 300
    while (s := background.state(run)).done < 1:
        assert s.state == "running" and time.time() < deadline, (run / "runner.log").read_text()
        time.sleep(0.1)
    worker = json.loads((run / "runner.pid").read_text())["pid"]
    group = background._group_members(worker)
    assert len(group) >= 3  # the worker and its two cell processes
    assert background.stop(run) is True
    assert background._group_members(worker) == [] and not any(background._alive(p) for p in group)
    s = background.state(run)
    assert s.state == "stopped" and 1 <= s.done < s.total == 6
    log = (run / "runner.log").read_text()
    assert "leaked semaphore" not in log, log  # the worker shut its pool down instead of dying by the signal
    assert "Exception ignored" not in log, log  # a repeated SIGTERM is not raised again while it exits
    # a cell in training when Stop came is not written part-trained: every cell on disk reached the last step
    assert all(json.loads(p.read_text())["curve"][-1]["step"] == 400 for p in (run / "cells").glob("*.json"))
    stamps = {p.name: p.stat().st_mtime_ns for p in (run / "cells").glob("*.json")}
    assert background.start(study, run) is True  # resume: the finished cells are not run again
    assert wait_for(run, {"finished", "failed"}).state == "finished", (run / "runner.log").read_text()
    assert json.loads((run / "status.json").read_text())["ran"] == 6 - len(stamps)
    assert stamps == {n: t for n, t in ((p.name, p.stat().st_mtime_ns) for p in (run / "cells").glob("*.json"))
                      if n in stamps}
