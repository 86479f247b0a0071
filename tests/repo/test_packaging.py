"""A non-editable install works: build the wheel, install it in a fresh venv, train and evaluate a nano
model through `python -m posbench` from a directory outside the checkout, with presets from the wheel."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TRAIN = ["--model-size", "nano", "model.seq_len=64", "model.vocab_size=512", "data.tokenizer.name=bytes",
         "train.stream=random", "train.budget_unit=tokens", "train.target_budgets=[4096]",
         "train.global_batch_tokens=512", "train.micro_batch=2", "train.eval_interval=0", "train.ckpt_interval=4",
         "logging.wandb=disabled", "schedule.warmup_tokens=1024", "train.out_dir=ck"]


def run(cmd, cwd, env, timeout=300):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_wheel_installs_and_runs_outside_the_checkout(tmp_path):
    # Build from a copy so the checkout gets no build/ or egg-info litter.
    src = tmp_path / "src_copy"
    shutil.copytree(REPO / "src", src / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    shutil.copytree(REPO / "configs", src / "configs")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w",
         str(tmp_path / "dist")], src, env)
    (wheel,) = (tmp_path / "dist").glob("posbench-*.whl")

    # torch & co. come from this interpreter's site-packages (a venv or the system); the wheel's posbench
    # sits in the new venv's own site-packages, which precedes them on sys.path.
    target = tmp_path / "venv"
    venv.create(target, system_site_packages=True, with_pip=False)
    py = target / "bin" / "python"
    own_site = Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                        tmp_path, env).stdout.strip())
    (own_site / "parent_env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)], tmp_path, env)

    work = tmp_path / "work"
    work.mkdir()
    where = run([str(py), "-c", "import posbench, posbench.training, posbench.config as c; "
                 "print(posbench.__file__); print(c.CONFIG_DIR)"], work, env).stdout.split()
    assert Path(where[0]).is_relative_to(own_site) and not Path(where[0]).is_relative_to(REPO)
    assert Path(where[1]) == own_site / "posbench" / "configs"
    # Every preset of the checkout ships, recursively (new folders included without a list to update).
    assert sorted(p.relative_to(REPO / "configs") for p in (REPO / "configs").rglob("*.yaml")) == \
        sorted(p.relative_to(Path(where[1])) for p in Path(where[1]).rglob("*.yaml"))

    # the console scripts: `posbench VERB` and its two aliases
    usage = run([str(target / "bin" / "posbench"), "--help"], work, env).stdout
    assert all(f"  {verb} " in usage for verb in ("train", "eval", "data", "study", "sweep", "export", "app",
                                                  "lm-eval")), usage
    assert run([str(target / "bin" / "posbench"), "study", "--help"], work, env).stdout.startswith("usage: ")
    assert (target / "bin" / "posbench-app").is_file() and (target / "bin" / "posbench-lm-eval").is_file()

    trained = run([str(py), "-m", "posbench", "train", *TRAIN], work, env)
    assert "saved final checkpoint ck/nano_rope_4.1K_s42/step_00000008" in trained.stdout + trained.stderr
    assert (work / "ck" / "nano_rope_4.1K_s42" / "step_00000008" / "model.pt").is_file()
    (work / "t.txt").write_text(" ".join(["the river city"] * 400))
    run([str(py), "-m", "posbench", "eval", "ck/nano_rope_4.1K_s42", "--suite", "ppl", "--lengths", "32,64",
         "--ppl-text", "t.txt", "--out", "ev", "--no-progress"], work, env)
    res = json.loads((work / "ev" / "results.json").read_text())
    assert list(res["suites"]) == ["ppl"]
    assert (work / "ev" / "summary.md").is_file()
