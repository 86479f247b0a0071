"""The README is a contract: its tagged command blocks parse, and the ones that need no download run.

CI runs the `install` and `test` blocks verbatim in a fresh venv (.ci/run); here every `runnable` block
runs in a scratch directory that holds links to the checkout's entry points, so the checkpoints and
outputs it writes stay out of the checkout.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("readme_blocks", ROOT / "scripts" / "readme_blocks.py")
readme_blocks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_blocks)


def test_install_and_test_blocks_are_unique_and_install_the_test_tools():
    install, test = readme_blocks.block("install"), readme_blocks.block("test")
    slow = readme_blocks.block("test-slow")
    assert "pip install -r requirements.txt -c requirements.lock" in install
    # the fast suite on every core, then the slow integration tests (pyproject's addopts leave them out)
    assert test.strip() == "python -m pytest tests -n auto"
    assert slow.strip() == "python -m pytest tests -m slow -n auto"
    # the install block must provide what the test blocks need: pytest, pytest-xdist (and ruff, run as a test)
    reqs = {line.split("#")[0].split(">")[0].split("=")[0].strip()
            for line in (ROOT / "requirements.txt").read_text().splitlines()}
    assert {"pytest", "pytest-xdist", "ruff"} <= reqs


def test_ci_runs_the_readme_blocks_and_installs_nothing_else():
    ci = (ROOT / ".ci" / "run").read_text()
    assert all(f"readme_blocks.py {tag}" in ci for tag in ("system", "install", "test", "test-slow"))
    commands = [line for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert not any("pip install" in line or "apt-get install" in line for line in commands), commands


def _write(tmp_path, text):
    path = tmp_path / "README.md"
    path.write_text(text)
    return path


def test_parser_reads_tagged_blocks_in_order_and_ignores_untagged(tmp_path):
    readme = _write(tmp_path, "intro\n<!-- readme: install -->\n```bash\npip install x\n```\n\n```bash\nuntagged\n```\n"
                              "<!-- readme:runnable -->\n~~~\na\nb\n~~~\n")
    assert readme_blocks.blocks(readme) == [("install", "pip install x"), ("runnable", "a\nb")]
    assert readme_blocks.block("install", readme) == "pip install x"


@pytest.mark.parametrize("text, message", [
    ("<!-- readme: test -->\n\n```\nx\n```\n", "must be followed directly"),
    ("<!-- readme: test -->\n```\nx\n", "never closed"),
    ("<!-- readme: test -->\n```\nx\n```\n<!-- readme: test -->\n```\ny\n```\n", "exactly one"),
    ("no blocks at all\n", "exactly one"),
])
def test_parser_refuses_broken_markup(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        readme_blocks.block("test", _write(tmp_path, text))


def test_cli_prints_the_block_and_fails_clearly():
    out = subprocess.run([sys.executable, "scripts/readme_blocks.py", "test"], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 0 and out.stdout.strip() == "python -m pytest tests -n auto"
    bad = subprocess.run([sys.executable, "scripts/readme_blocks.py", "nonesuch"], cwd=ROOT, capture_output=True,
                         text=True)
    assert bad.returncode == 1 and bad.stderr.startswith("error: ") and "nonesuch" in bad.stderr


@pytest.mark.slow
def test_every_runnable_block_exits_zero(tmp_path):
    runnable = [text for tag, text in readme_blocks.blocks() if tag == "runnable"]
    assert len(runnable) >= 2, "the smoke run + eval and the explore commands are tagged runnable"
    for name in ("README.md", "train.py", "eval.py", "scripts", "configs"):
        (tmp_path / name).symlink_to(ROOT / name)
    # `python` in the blocks is this interpreter; no network, WandB offline, no progress bars in logs
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "WANDB_MODE": "offline", "TQDM_DISABLE": "1"}
    for text in runnable:
        p = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, f"README block failed ({p.returncode}):\n{text}\n--- stderr:\n{p.stderr[-3000:]}"
    # the smoke block's eval wrote its results into the run directory, beside (not inside) the step
    assert list((tmp_path / "checkpoints").glob("nano_rope_*/eval/step_*/results.json"))
