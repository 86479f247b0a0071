"""Two runs of the same directory at once: the second stops before touching it, naming the holder."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--model-size", "nano", "model.seq_len=64", "train.stream=random", "train.budget_unit=tokens",
        "train.global_batch_tokens=512", "train.micro_batch=2", "train.eval_interval=0", "train.ckpt_interval=0",
        "logging.wandb=disabled", "schedule.warmup_tokens=1024", "train.run_name=same"]


def test_second_concurrent_run_of_a_directory_is_refused(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *ARGS, "train.target_budgets=[200000]",
                              f"train.out_dir={tmp_path}"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        metrics = tmp_path / "same" / "metrics.jsonl"
        deadline = time.time() + 60
        while not (metrics.is_file() and metrics.stat().st_size) and first.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert first.poll() is None, first.stdout.read()
        rows = metrics.read_text().count("\n")
        second = subprocess.run([sys.executable, str(ROOT / "train.py"), *ARGS, "train.target_budgets=[200000]",
                                 f"train.out_dir={tmp_path}", "--resume", "auto"], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 2, second.stdout + second.stderr
        (line,) = second.stderr.strip().splitlines()
        assert line.startswith("error: another training run (pid ")
        assert f"pid {first.pid} on {socket.gethostname()}" in line and str(tmp_path / "same") in line
        assert not list((tmp_path / "same").glob("step_*"))  # the second run wrote nothing
        assert metrics.read_text().count("\n") >= rows  # and the first one goes on
        assert first.poll() is None
    finally:
        first.kill()
        first.wait()
