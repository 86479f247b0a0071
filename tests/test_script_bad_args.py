"""Scripts given bad arguments exit 2 with one error line and no traceback (the exit-code contract of
posbench/errors.py): a count that is not one (`--cells -1` dropped a cell silently, `--steps 0` was accepted), a
README whose test lines changed form (`lock.py refresh` would write a lock having run no test), a data manifest
whose entry is not a count (a TypeError when read)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from posbench.data.manifest import Manifest
from posbench.errors import DataError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import lock  # noqa: E402

CASES = {
    "bench_study cells": (["scripts/bench_study.py", "--cells", "-1"], "argument --cells: -1 must be >= 1"),
    "bench_study steps": (["scripts/bench_study.py", "--steps", "0"], "argument --steps: 0 must be >= 1"),
    "bench_study workers": (["scripts/bench_study.py", "--workers", "x"], "argument --workers: 'x' is not an integer"),
    "bench_train steps": (["scripts/bench_train.py", "--steps", "0"], "argument --steps: 0 must be >= 1"),
    "bench_train warmup": (["scripts/bench_train.py", "--warmup", "-3"], "argument --warmup: -3 must be >= 0"),
    "bench_train micro": (["scripts/bench_train.py", "--micro-batch", "0"], "argument --micro-batch: 0 must be >= 1"),
    "lock choice": (["scripts/lock.py", "freshen"], "argument action: invalid choice: 'freshen'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_argument_is_exit_2_with_one_error_line(case):
    argv, text = CASES[case]
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    errors = [line for line in proc.stderr.splitlines() if "error: " in line]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr
    assert text in errors[0], proc.stderr


def test_lock_refresh_refuses_a_readme_without_test_commands(tmp_path, capsys):
    readme = tmp_path / "README.md"
    text = (ROOT / "README.md").read_text()
    # the test lines changed form: `pytest -q ...` instead of `python -m pytest -q ...`
    readme.write_text(text.replace("python -m pytest", "pytest"))
    code = lock.main(["refresh", "--readme", str(readme), "--python", "/nonexistent/python"])  # no venv is made
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "hold no `python -m pytest ...` line" in err, err
    assert str(readme) in err
    readme.write_text("# a README without the tagged blocks\n")
    assert lock.main(["refresh", "--readme", str(readme)]) == 2
    assert "expected exactly one `<!-- readme: install -->` block" in capsys.readouterr().err
    assert lock.readme_test_commands()  # the repository's README has them


@pytest.mark.parametrize("entry,field", [({"index": "four", "split": "train"}, "index four"),
                                         ({"index": 1, "tokens": -2}, "tokens -2"), ("oops", "not a JSON object")])
def test_a_manifest_entry_that_is_not_a_count_names_the_file(tmp_path, entry, field):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"version": 1, "kind": "shards", "files": {"train_000.bin": entry}}))
    with pytest.raises(DataError) as e:
        Manifest(path, "shards")
    assert str(path) in str(e.value) and field.replace("four", "'four'") in str(e.value) and e.value.exit_code == 2
