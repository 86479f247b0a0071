"""Run names quoted in the docs are the names train.py gives those runs (the README once said 2.4B for a
run named 2.35B)."""

import re
from pathlib import Path

import pytest

from posbench.config import load_config
from posbench.training.plan import make_plan
from posbench.training.rundir import default_name

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"checkpoints/((tiny|small|medium|large)_([a-z0-9_]+?)_(\d[\d.]*[KMBT])_s(\d+))")


def quoted_names():
    files = [ROOT / "README.md", ROOT / "eval.py", ROOT / "train.py", *ROOT.glob("docs/*.md"),
             *ROOT.glob("scripts/*.py"), *ROOT.glob("src/posbench/**/*.py")]
    return sorted({(m.group(1), f.relative_to(ROOT).as_posix()) for f in files for m in NAME.finditer(f.read_text())})


def test_some_names_are_quoted():
    assert len(quoted_names()) >= 3


@pytest.mark.parametrize("name,where", quoted_names())
def test_quoted_run_name_is_the_default_name(name, where):
    size, pe, seed = NAME.match("checkpoints/" + name).group(2, 3, 5)
    cfg = load_config(model_size=size, pe_type=pe, overrides=[f"seed={seed}"])
    plan = make_plan(cfg, 1, "cpu")
    assert name == default_name(size, pe, plan.budgets[-1], int(seed)), where
