"""Starting and stopping work from the app: nothing starts on Enter (the run page has no form), the study's
cost is on the page before Start, a running study has a Stop button that ends its worker and the worker's
cell processes; the launcher hides Deploy and usage statistics and refuses a file as `--runs`."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from posbench.app import background
from posbench.app.studyform import build_study
from posbench.config_loader import to_dict
from tests.app.helpers import MAIN, TINY

# stands in for `python -m posbench.app.worker RUN_DIR` (same command line, as stop checks it): it starts a
# "cell process" in its process group, as the study runner's pool does, and both wait to be stopped
FAKE_WORKER = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"


def fake_worker(run_dir: Path) -> subprocess.Popen:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "spec.json").write_text(json.dumps(to_dict(build_study(TINY)), sort_keys=True, indent=1))
    proc = subprocess.Popen([sys.executable, "-c", FAKE_WORKER, "posbench.app.worker", str(run_dir)],
                            start_new_session=True)
    (run_dir / "runner.pid").write_text(str(proc.pid))
    deadline = time.time() + 30
    while len(background._group_members(proc.pid)) < 2:  # the worker and its cell process
        assert time.time() < deadline
        time.sleep(0.05)
    return proc


def test_stop_ends_the_worker_and_its_cell_processes(tmp_path):
    run = tmp_path / "tiny"
    proc = fake_worker(run)
    members = background._group_members(proc.pid)
    assert background.state(run).state == "running"
    assert background.stop(run, grace_s=5) is True
    assert background._group_members(proc.pid) == []
    assert all(not background._alive(pid) for pid in members)
    assert background.state(run).state == "stopped" and not (run / "runner.pid").exists()
    assert background.stop(run) is False  # nothing left to stop


def test_stop_leaves_a_process_that_is_not_the_run_worker_alone(tmp_path):
    run = tmp_path / "tiny"
    run.mkdir()
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)  # e.g. the pid was reused
    try:
        (run / "runner.pid").write_text(str(other.pid))
        assert background.stop(run) is False and other.poll() is None
    finally:
        other.kill()
        other.wait()


def form_blocks(node) -> list:
    found = [node] if getattr(node, "type", None) == "form" else []
    for child in getattr(node, "children", {}).values():
        found += form_blocks(child)
    return found


@pytest.fixture
def app(tmp_path, monkeypatch):
    monkeypatch.setenv("POSBENCH_APP_RUNS", str(tmp_path / "runs"))
    return AppTest.from_file(MAIN, default_timeout=120)


def test_nothing_starts_without_start_and_the_cost_comes_first(app, tmp_path):
    at = app.run()
    assert form_blocks(at._tree) == []  # no st.form: Enter in a field cannot submit anything
    cost = at.info[0].value
    assert cost.startswith("**Cost**: 100 cells") and "approximate" in cost and " min on " in cost
    at.text_input(key="f_name").set_value("entered").run()  # typing and Enter apply the value, no more
    at.text_input(key="f_seeds").set_value("0").run()
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert at.info[0].value.startswith("**Cost**: 20 cells")
    assert at.button(key="start").label == "Start study" and not at.button(key="start").disabled


def task_cells(study):
    from posbench.studies.study_runner import TaskCell
    from posbench.studies.study_spec import expand

    return [TaskCell(c) for c in expand(study)]


def test_cost_estimate_by_hand():
    from posbench.grid.estimate import estimate

    study = build_study({**TINY, "steps": 100})
    est = estimate(task_cells(study), study.workers)
    from posbench.data.tasks.task import build_task
    from posbench.model.flops import model_stats
    from posbench.studies.cell_config import cell_config
    from posbench.studies.study_spec import expand

    flop = 0.0
    for cell in expand(study):
        cfg = cell_config(cell, build_task(cell.task), Path("work"))
        flop += 6 * model_stats(cfg.model, cfg.pe, "cpu").params_total * cfg.train.global_batch_tokens * 100
    assert (est.cells, est.todo, est.processes) == (2, 2, 1) and est.train_flop == pytest.approx(flop)
    from posbench.grid.estimate import OTHER_CPU_S_PER_CELL, TRAIN_FLOP_PER_CPU_S, machine_speed

    speed = machine_speed()
    assert est.minutes == pytest.approx((flop / TRAIN_FLOP_PER_CPU_S + 2 * OTHER_CPU_S_PER_CELL) / speed / 60)
    assert f"{TRAIN_FLOP_PER_CPU_S * speed / 1e9:.0f} GFLOP of training per CPU-second" in est.text()


def test_the_run_page_and_posbench_study_estimate_give_the_same_estimate(tmp_path, capsys):
    """One estimator (grid/estimate.py): the page's cost line for a study is the line `posbench study SPEC --out DIR
    --estimate` prints for it, the cells finished in DIR skipped by both, and the command writes nothing."""
    import yaml

    from posbench.app.views.run import _estimate
    from posbench.cli.study import main
    from posbench.studies.cell_files import cell_path, cell_spec
    from posbench.studies.cell_result import CellResult, dumps_cell

    study = build_study({**TINY, "seeds": "0, 1"})
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(to_dict(study)))
    run_dir = tmp_path / "runs" / "tiny"
    done = task_cells(study)[0].item
    cell_path(run_dir, done).parent.mkdir(parents=True)
    cell_path(run_dir, done).write_text(dumps_cell(CellResult(
        cell_id=done.cell_id, task="k_back", pe=done.label, seed=done.seed, axes={}, id_acc=0.5,
        spec=json.loads(cell_spec(done)))))
    page = _estimate(json.dumps(to_dict(study), sort_keys=True), str(run_dir))
    assert main([str(spec), "--out", str(run_dir), "--estimate"]) == 0
    printed = capsys.readouterr().out
    assert page.startswith("4 cells (1 already finished here are skipped): ") and printed.count("\n") == 1
    # the same words and numbers up to the load average, which each reads when it is made
    assert printed.split(" assumes an idle machine")[0] == "estimate: " + page.split(" assumes an idle machine")[0]
    assert sorted(p.name for p in run_dir.rglob("*")) == ["cells", f"{done.cell_id}.json"]


def test_the_page_stops_a_running_study(app, tmp_path):
    run = tmp_path / "runs" / "tiny"
    proc = fake_worker(run)
    try:
        at = app.run()
        assert "(running)" in at.get("progress")[0].proto.text
        at.button(key="stop").click().run()
        assert background._group_members(proc.pid) == []
        assert background.state(run).state == "stopped"
        assert at.button(key="resume").label.startswith("Resume")
    finally:
        proc.kill()
        proc.wait()


def test_launcher_defaults_and_runs_must_be_a_directory(tmp_path, monkeypatch, capsys):
    from streamlit.web import cli as st_cli

    from posbench.cli.app import main

    argv = []
    monkeypatch.setattr(st_cli, "main", lambda: argv.extend(sys.argv) or 0)
    monkeypatch.setattr(sys, "argv", ["posbench-app"])
    assert main(["--runs", str(tmp_path / "runs"), "--server.port", "8601"]) == 0
    assert "--client.toolbarMode=minimal" in argv and "--browser.gatherUsageStats=false" in argv
    assert argv[-2:] == ["--server.port", "8601"]
    argv.clear()
    assert main(["--runs", str(tmp_path / "runs"), "--client.toolbarMode", "developer"]) == 0
    assert not any(a.startswith("--client.toolbarMode=") for a in argv)  # the user's flag wins
    capsys.readouterr()
    (tmp_path / "file").write_text("")
    argv.clear()
    assert main(["--runs", str(tmp_path / "file")]) == 2 and argv == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --runs") and "regular file" in err


def test_the_live_loss_chart_shows_one_task_at_a_time(app, tmp_path):
    """Two tasks of one PE and seed would share a colour and a dash: the chart asks which task."""
    from posbench.studies.study_spec import expand

    run = tmp_path / "runs" / "two"
    study = build_study({**TINY, "name": "two", "tasks": "{name: k_back, k: 2}\n{name: modular_sum}"})
    (run / "cells").mkdir(parents=True)
    (run / "spec.json").write_text(json.dumps(to_dict(study), sort_keys=True, indent=1))
    (run / "status.json").write_text(json.dumps({"state": "finished"}))
    for c in expand(study):
        (run / "cells" / f"{c.cell_id}.json").write_text(json.dumps(
            {"cell_id": c.cell_id, "task": c.task.name, "pe": c.label, "seed": c.seed, "axes": {}, "chance": 0.5,
             "id_acc": 0.5, "ood_acc": 0.5, "train_loss": [{"step": 1, "loss": 2.0}, {"step": 4, "loss": 1.0}]}))
    at = app.run()
    assert at.selectbox(key="live_loss_task").options == ["k_back", "modular_sum"]
    at.selectbox(key="live_loss_task").set_value("modular_sum").run()
    live = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert sorted(t["hovertemplate"].split(":")[0] for t in live["data"]) == ["modular_sum_learned_s0",
                                                                             "modular_sum_rope_s0"]
    assert [t["legendgroup"] for t in live["data"]] == ["rope", "learned"]  # the study's order, as its PNGs


def test_cost_estimate_says_it_assumes_an_idle_machine_and_shows_the_load(monkeypatch):
    from posbench.grid import estimate

    monkeypatch.setattr(estimate.os, "getloadavg", lambda: (7.25, 5.0, 4.0))
    monkeypatch.setattr(estimate, "usable_cores", lambda: 2)
    cells = task_cells(build_study(TINY))
    text = estimate.estimate(cells, 1).text()
    assert "it assumes an idle machine: the load average now is 7.2 on 2 cores, so expect it to take longer" in text
    monkeypatch.setattr(estimate.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert "load average now is 0.1 on 2 cores)" in estimate.estimate(cells, 1).text()


def test_the_cost_estimate_builds_each_model_once_across_page_reruns(monkeypatch):
    """Streamlit reruns the page on every widget change: the estimate built a model per (task, row) each time
    (99 s at 512 layers); now each model shape is built once for the page server's life."""
    import posbench.model.flops as flops
    from posbench.app import studyform
    from posbench.grid.estimate import estimate
    from posbench.studies import cost

    calls = []
    real = flops.model_stats
    monkeypatch.setattr(flops, "model_stats", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(cost, "_PARAMS", {})
    study = studyform.build_study({**studyform.defaults(), "seeds": "0"})
    first = estimate(task_cells(study), study.workers)
    built = len(calls)
    assert 0 < built <= len(study.tasks) * len(study.pes)
    # a rerun builds nothing
    assert estimate(task_cells(study), study.workers).train_flop == first.train_flop and len(calls) == built
