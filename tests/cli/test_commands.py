"""Commands live together (a design rule): `python -m posbench VERB` reaches every command, and the checkout's
train.py, eval.py, scripts/*.py and old `python -m` paths are shims over the same parsers."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posbench.cli.main import VERBS

ROOT = Path(__file__).resolve().parents[2]
VERB_NAMES = ["train", "eval", "data", "study", "sweep", "export", "app", "lm-eval", "results"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def posbench(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posbench", *args], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=180)


def test_help_lists_every_verb():
    assert list(VERBS) == VERB_NAMES
    proc = posbench("--help")
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[0] for line in proc.stdout.split("commands:\n")[1].split("\n\n")[0].splitlines()]
    assert listed == VERB_NAMES


def test_no_verb_and_an_unknown_verb_are_usage_errors():
    assert posbench().returncode == 2
    proc = posbench("trian")
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown command `trian`")


@pytest.mark.parametrize("verb", VERB_NAMES)
def test_every_verb_has_help(verb):
    proc = posbench(verb, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


# shim -> the `posbench` arguments it stands for
SHIMS = {
    "train.py": ["train"],
    "eval.py": ["eval"],
    "scripts/study.py": ["study"],
    "scripts/sweep.py": ["sweep"],
    "scripts/export_hf.py": ["export"],
    "-m posbench.data.prepare_fineweb": ["data"],
    "-m posbench.evaluation.prepare_data": ["data", "download-eval"],
    "-m posbench.app": ["app"],
}
HELPS = """
import contextlib, io, json, runpy, sys
from posbench.cli.main import main

def run(fn):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            fn()
        except SystemExit as e:
            assert e.code in (0, None), e.code
    return out.getvalue()

def shim(target, argv):
    sys.argv = [target, *argv]
    if target.startswith("-m "):
        return runpy.run_module(target[3:], run_name="__main__", alter_sys=True)
    return runpy.run_path(target, run_name="__main__")

shims = json.loads(sys.argv[1])
print(json.dumps({t: [run(lambda: shim(t, ["--help"])), run(lambda: main([*v, "--help"]))]
                  for t, v in shims.items()}))
"""


def options(help_text: str) -> str:
    """The help without its usage block (which names the program, and wraps by the name's length)."""
    return help_text.split("\n\n", 1)[1]


def test_shims_take_the_same_arguments_as_their_verb():
    proc = subprocess.run([sys.executable, "-c", HELPS, json.dumps(SHIMS)], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    for target, (shim_help, verb_help) in json.loads(proc.stdout).items():
        assert shim_help.startswith("usage:") and options(shim_help) == options(verb_help), target
