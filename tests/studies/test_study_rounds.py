"""A study tells the truth about its time and leaves a report early: the estimate (the app's estimator) is printed
before the first cell, cells run seed-major, the report is rewritten as each seed round completes, and Ctrl-C
writes the report of the cells finished by then (exit 130; re-running finishes the rest)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posbench.grid.cells import pending
from posbench.studies import study_runner
from posbench.studies.study_runner import estimate_text, run_study, seed_major
from posbench.studies.study_spec import expand, load_study
from tests.conftest import as_from_a_terminal
from tests.studies.test_study import MINI

ROOT = Path(__file__).resolve().parents[2]


def mini(tmp_path, seeds="0, 1", steps=12):
    """test_study's two-PE study, its reference dropped (these tests judge no claim), at `steps`."""
    path = tmp_path / "mini.yaml"
    path.write_text(MINI.replace("SEEDS", seeds).replace("steps: 12", f"steps: {steps}")
                    .replace("reference: {k_back: {rope: {id: 1.0, ood: 1.0}}}\n", ""))
    return path


def test_cells_run_seed_major_in_the_grids_order_within_a_round(tmp_path):
    study = load_study(str(mini(tmp_path, seeds="2, 0, 1")))
    order = [c.cell_id for c in seed_major(expand(study), study.seeds)]
    assert order == ["k_back_rope_s2", "k_back_learned_s2", "k_back_rope_s0", "k_back_learned_s0",
                     "k_back_rope_s1", "k_back_learned_s1"]


def test_the_estimate_is_printed_before_the_first_cell_and_is_the_apps(tmp_path, monkeypatch):
    study = load_study(str(mini(tmp_path)))
    out = tmp_path / "out"
    seen, kinds = [], []
    # the study takes its cells through the grid's one `pending` (the sweep does too: test_sweep_estimate.py)
    monkeypatch.setattr(study_runner, "pending", lambda cells, *a: kinds.append(cells[0].kind) or pending(cells, *a))
    run_study(study, out, progress=False, log=lambda line: seen.append((line, sorted((out / "cells").glob("*")))))
    assert kinds == ["task"]
    first, cells_then = seen[0]
    assert first.startswith("estimate: 4 cells: ") and cells_then == []
    # the app's run page shows the same estimator's line (the load average aside, read when each is made)
    assert first.split(" assumes an idle machine")[0] == ("estimate: " + estimate_text(study, tmp_path / "new")).split(
        " assumes an idle machine")[0]
    assert any(line.startswith("seed round 1 of 2 done") for line, _ in seen)
    seen.clear()
    run_study(study, out, progress=False, log=lambda line: seen.append(line))  # nothing to run: no estimate
    assert not any(line.startswith("estimate:") for line in seen)


def test_estimate_prints_the_first_look_of_sequential_seeds_and_writes_nothing(tmp_path, capsys):
    """`posbench study --estimate` says what the run would say first: with sequential seeds, the first look's cells
    (2 rows x 3 start seeds), as `this look` (later looks depend on the verdicts)."""
    from posbench.cli.study import main

    out = tmp_path / "out"
    assert main([str(mini(tmp_path)), "--sequential-seeds", "3:5:1", "--out", str(out), "--estimate"]) == 0
    assert capsys.readouterr().out.startswith("estimate: this look, 6 cells: ") and not out.exists()


def _header_cells(report: str) -> int:
    return int(report.split("\n\n", 2)[1].split(" cells:")[0])


def test_a_report_exists_after_the_first_round_and_ctrl_c_writes_the_finished_cells(tmp_path):
    spec = mini(tmp_path, seeds="0, 1, 2", steps=60)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "posbench", "study", str(spec), "--out", str(out), "--no-progress"]
    p = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=as_from_a_terminal)
    deadline = time.time() + 300
    while time.time() < deadline and not (out / "cells" / "k_back_rope_s1.json").is_file():
        time.sleep(0.05)
    # round 1 (seed 0) finished before any seed-1 cell: its report was written then, with both rows at one seed
    report = (out / "report.md").read_text()
    assert _header_cells(report) == 2 and "x 1 seeds" in report
    assert "| k_back | rope |" in report and "| k_back | learned |" in report
    os.kill(p.pid, signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    done = sorted(f.stem for f in (out / "cells").glob("*.json"))
    assert p.returncode == 130, stderr[-2000:]
    assert 3 <= len(done) < 6, done  # seed 0's two, seed 1's first, maybe its second: the interrupt landed mid-way
    assert f"interrupted: {len(done)} of 6 cells finished" in stderr and "Traceback" not in stderr
    report = (out / "report.md").read_text()
    assert _header_cells(report) == len(done)
    cells = json.loads((out / "results.json").read_text())["cells"]
    assert sorted(c["cell_id"] for c in cells) == done
    assert stdout.startswith("estimate: 6 cells: ")


def test_ctrl_c_during_a_cells_final_checkpoint_stops_the_study_there(tmp_path, monkeypatch, terminal_sigint):
    """A signal after a cell's last step (its final checkpoint, then its final scoring) has no step left to stop
    at; the study still stops at that cell, which is not written, instead of going on to the next."""
    from tests.training.test_stop_signal import signal_during

    study, out = load_study(str(mini(tmp_path, seeds="0, 1"))), tmp_path / "out"
    signal_during(monkeypatch, "final", nth=2)  # the second cell's: k_back_learned_s0
    with pytest.raises(study_runner.Interrupted) as stopped:
        run_study(study, out, progress=False, log=lambda line: None)
    assert (stopped.value.finished, stopped.value.cells) == (1, 4)
    assert sorted(f.stem for f in (out / "cells").glob("*.json")) == ["k_back_rope_s0"]
    assert _header_cells((out / "report.md").read_text()) == 1
