"""Adding an eval suite touches its own file only: a module dropped into evaluation/suites/ is registered,
gets its EvalConfig field (strictly loaded, `--set NAME.key=value`), joins `--suite all` in its order, and
`eval.py --suite NAME` plans it. Checked on a copy of the package, so the real tree is never written."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import posbench

TOY = '''
from dataclasses import dataclass

from posbench.evaluation.evaluator import Evaluator
from posbench.evaluation.suite_registry import SUITES


@dataclass
class ToyConfig:
    repeats: int = 1


@SUITES.register("toy")
class Toy(Evaluator):
    title = "Toy"
    options = ToyConfig
    order = 3  # between algorithmic (2) and passkey (3, registered earlier: stable by registration order)
'''

PROBE = """
from posbench.evaluation.eval_config import load_eval_config
from posbench.evaluation.suites import ALL
cfg = load_eval_config([], [{"toy": {"repeats": 4}}, {"suites": ["toy"]}])
print(ALL, cfg.toy, cfg.suite_list(), cfg.suite_config("toy").repeats)
try:
    load_eval_config([], [{"toy": {"repeat": 4}}])
except Exception as e:
    print(type(e).__name__, e)
"""


def test_a_suite_module_alone_adds_a_suite(tmp_path):
    copy = tmp_path / "src" / "posbench"
    shutil.copytree(Path(posbench.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "evaluation" / "suites" / "toy.py").write_text(textwrap.dedent(TOY))
    out = subprocess.run([sys.executable, "-c", PROBE], env={"PYTHONPATH": str(copy.parent), "PATH": ""},
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert first == ("['ppl', 'algorithmic', 'passkey', 'toy', 'niah', 'long_context'] ToyConfig(repeats=4) ['toy'] 4")
    assert second.startswith("ConfigError") and "did you mean `repeats`" in second


def test_every_registered_suite_has_its_eval_config_field():
    import dataclasses

    from posbench.evaluation.eval_config import EvalConfig
    from posbench.evaluation.suites import ALL, BY_NAME, SUITES

    fields = {f.name: f.type for f in dataclasses.fields(EvalConfig)}
    for name in SUITES:
        assert fields[name] is SUITES[name].options
    assert sorted(ALL + BY_NAME) == sorted(SUITES)
    assert ALL == ["ppl", "algorithmic", "passkey", "niah", "long_context"]
    assert BY_NAME == ["lambada", "first_token"]
