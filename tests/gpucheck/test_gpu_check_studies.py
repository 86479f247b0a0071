"""scripts/gpu_check.py studies: what the trip back carries (by hand), a stop at the budget ending every process of a
job, and the dry run end to end on the CPU (a slow test: a two-cell study and a two-run sweep side by side, packed,
the study reported again from its unpacked folder with --report-only, nothing retrained)."""

import json
import os
import signal
import subprocess
import tarfile
import time

import pytest

from posbench.cli.study import main as study_main
from posbench.gpucheck.studies import kept, pack, stop
from tests.gpucheck.test_gpu_check import NOT_ON_GPU_IMAGE, run_isolated
from tests.studies.test_study import mini
from tests.sweeps.test_sweep import make_data, sweep_yaml


def test_pack_carries_results_and_the_newest_weights_only(tmp_path):
    job = tmp_path / "sweep"
    files = ["report.md", "cells/a_s0.json", "logs/a_s0.log", "work/a_s0/rows/x.npy", "rows/y.bin",
             "checkpoints/run/metrics.jsonl", "checkpoints/run/step_00000010/model.pt",
             "checkpoints/run/step_00000010/optim.pt", "checkpoints/run/step_00000010/rng_rank0.pt",
             "checkpoints/run/step_00000200/model.pt", "checkpoints/run/step_00000200/optim.pt",
             "checkpoints/run/step_00000200/config.yaml", "checkpoints/run/.lock"]
    for f in files:
        (job / f).parent.mkdir(parents=True, exist_ok=True)
        (job / f).write_text(f)
    want = {"report.md", "cells/a_s0.json", "logs/a_s0.log", "checkpoints/run/metrics.jsonl",
            "checkpoints/run/step_00000200/model.pt", "checkpoints/run/step_00000200/config.yaml"}
    assert {f for f in files if kept(job / f, job)} == want
    assert pack(job, tmp_path / "out" / "sweep.tar.gz") == len(want)
    with tarfile.open(tmp_path / "out" / "sweep.tar.gz") as tar:
        assert sorted(tar.getnames()) == sorted(f"sweep/{f}" for f in want)
        assert tar.extractfile("sweep/report.md").read() == b"report.md"
    assert not (tmp_path / "out" / ".sweep.tar.gz.tmp").exists()


def test_stop_ends_every_process_of_the_job(tmp_path):
    """A job is a shell running commands in its own process group: the stop reaches the command running under it,
    not just the shell."""
    pid_file = tmp_path / "child.pid"
    proc = subprocess.Popen(["bash", "-c", f"sleep 300 & echo $! > {pid_file}; wait"], start_new_session=True)
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.05)
    child = int(pid_file.read_text())
    stop(proc, grace_s=5)
    assert proc.returncode == -signal.SIGTERM
    for _ in range(100):  # the orphaned child is reaped by init a moment later
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        state = open(f"/proc/{child}/status").read().split("State:")[1].split()[0] if os.path.exists(
            f"/proc/{child}/status") else "gone"
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the job's child {child} outlived the stop")


@pytest.mark.slow
def test_dry_run_end_to_end(tmp_path, monkeypatch):
    """The study and sweep commands run in fresh interpreters that cannot import what the GPU image lacks (a folder
    of modules that refuse to import, first on PYTHONPATH)."""
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    for name in NOT_ON_GPU_IMAGE:
        (blocked / f"{name}.py").write_text(f"raise ImportError('{name} is not on the GPU image')\n")
    monkeypatch.setenv("PYTHONPATH", str(blocked))
    study = mini(tmp_path)
    sweep = sweep_yaml(tmp_path, make_data(tmp_path), eval={
        "suites": ["ppl"], "lengths": [32, 64], "device": "cpu", "ppl": {"protocols": ["nonoverlap"],
                                                                         "max_tokens": 1024}})
    out = tmp_path / "out"
    done = run_isolated(["studies", "--dry-run", "--budget-s", "500", "--study", str(study), "--study-seeds", "0",
                         "0,1", "--study-workers", "1", "--sweep", str(sweep), "--runs", str(tmp_path / "runs"),
                         "--out", str(out)], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| study | ok" in done.stdout and "| sweep | ok" in done.stdout
    jobs = {r["job"]: r for r in json.loads((out / "studies.json").read_text())["tables"]["jobs"]}
    assert jobs["study"]["cells"] == 4 and jobs["sweep"]["status"] == "ok"
    assert jobs["study"]["commands"][1].endswith("--seeds 0 1 --smoke")
    unpacked = tmp_path / "unpacked"
    for name in ("study", "sweep"):
        with tarfile.open(out / f"{name}.tar.gz") as tar:
            tar.extractall(unpacked, filter="data")
    names = {p.relative_to(unpacked).as_posix() for p in unpacked.rglob("*") if p.is_file()}
    assert {"study/report.md", "study/results.json", "study/cells/k_back_rope_s1.json", "sweep/report.md"} <= names
    assert not any("optim.pt" in n or "/work/" in n for n in names)
    assert sum(n.endswith("model.pt") for n in names) == 2  # the newest step of each of the two runs
    assert (out / "study.log").read_text().count("4 cells (2 run now)") == 1
    # reported again where it was unpacked (--smoke: the dry run's cells are the smoke study's), nothing retrained
    before = json.loads((unpacked / "study" / "results.json").read_text())["cells"]
    assert study_main([str(study), "--smoke", "--seeds", "0", "1", "--report-only", "--out", str(unpacked / "study"),
                       "--no-progress"]) == 0
    assert json.loads((unpacked / "study" / "results.json").read_text())["cells"] == before
