"""Scripts given bad arguments exit 2 with one error line and no traceback (the exit-code contract of
posbench/errors.py): a count that is not one (`--cells -1` dropped a cell silently, `--steps 0` was accepted), a
README whose test lines changed form (`lock.py refresh` would write a lock having run no test), a data manifest
whose entry is not a count (a TypeError when read)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posbench.data.manifest import Manifest
from posbench.errors import DataError

ROOT = Path(__file__).resolve().parents[2]
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


# every argparse script of scripts/, run in this process (torch is imported once): script -> [(argv, exit code, text
# of the one error line)]. Each of these once did work on a bad value, or stopped with a traceback (comments).
MAINS = {
    "bench_data": [(["--cores", "0"], 2, "argument --cores: 0 must be >= 1"),  # ValueError: max_workers
                   (["--mb", "-1"], 2, "argument --mb: -1 must be > 0"),  # a parquet column of type null
                   (["--repeats", "0"], 2, "argument --repeats: 0 must be >= 1"),  # UnboundLocalError
                   (["--mb", "0.01", "--cores", "1"], 2, "documents, fewer than the 8 files the corpus is split into")],
    "bench_eval": [(["--lengths", "0"], 2, "argument --lengths: 0 must be >= 1"),  # ZeroDivisionError
                   (["--repeats", "0"], 2, "argument --repeats: 0 must be >= 1"),  # KeyError (0, 'ppl 1024')
                   (["--batch-size", "0"], 2, "argument --batch-size: 0 must be >= 1"),  # never returned
                   (["--threads", "0"], 2, "argument --threads: 0 must be >= 1"),  # RuntimeError
                   (["--json", "/nonexistent/dir/rows.json"], 2, "its folder /nonexistent/dir does not exist"),
                   (["--pes", "rope", "--lengths", "32", "--ppl-tokens", "32", "--passkey-lengths", "--no-memory",
                     "--algorithmic", "nope"], 2, "unknown task `nope`")],  # a ConfigError's traceback
    "bench_eval_memory": [(["--lengths", "0"], 2, "argument --lengths: 0 must be >= 1"),  # ZeroDivisionError
                          (["--rows", "nope"], 2, "argument --rows: invalid choice: 'nope'")],
    "bench_long_context": [(["--depths", "abc"], 2, "argument --depths: 'abc' is not a number"),  # ValueError
                           (["--depths", "0,2"], 2, "argument --depths: 2 is not in [0, 1]"),
                           (["--batch-size", "0"], 2, "argument --batch-size: 0 must be >= 1"),  # range() step 0
                           (["--ckpt", "/nonexistent"], 4, "/nonexistent: no such checkpoint")],
    "bench_loss_memory": [(["--size", "nope"], 2, "no model preset `nope`"),  # CalledProcessError of the child
                          (["--seq-len", "0"], 2, "argument --seq-len: 0 must be >= 1"),  # CalledProcessError
                          (["--chunks", "-5"], 2, "argument --chunks: -5 must be >= 0")],  # never returned
    "bench_train": [(["--threads", "-1"], 2, "argument --threads: -1 must be >= 0"),
                    (["--clock", "thread", "--threads", "2"], 2, "--clock thread measures one CPU thread"),  # exit 1
                    (["--json", "/nonexistent/dir/t.json"], 2, "its folder /nonexistent/dir does not exist")],
    "bench_study": [(["--json", "/nonexistent/dir/s.json"], 2, "its folder /nonexistent/dir does not exist")],
    "calibrate_stats": [(["--draws", "0"], 2, "--draws and --n-boot must be positive"),
                        (["--methods", "nope"], 2, "argument --methods: invalid choice: 'nope'"),
                        (["--sequential", "2:10"], 2, "seeds.start is 2: sequential seeds start at >= 3")],
    "compare_studies": [(["/nonexistent/a", "/nonexistent/b"], 2, "/nonexistent/a: no results.json there"),
                        (["{bad}", "{bad}"], 2, "results.json: not a study's results.json (not JSON"),
                        (["{bad}", "{bad}", "--metric", "nope"], 2, "argument --metric: invalid choice: 'nope'")],
    "describe_model": [(["--model-size", "nope"], 2, "no model preset `nope`"),
                       (["--pe-type", "nope"], 2, "unknown positional encoding `nope`")],
    "export_hf": [(["/nonexistent", "{tmp}/exported"], 4, "/nonexistent")],
    "fingerprint_behaviour": [(["--compare", "/nonexistent/a.json", "{bad}"], 2, "/nonexistent/a.json does not exist"),
                              (["--compare", "{bad}", "{bad}"], 2, "is not a fingerprint file (not JSON"),
                              ([], 2, "give --out FILE (or --compare BEFORE AFTER)")],
    "gpu_check": [(["nope"], 2, "argument mode: invalid choice: 'nope'"),
                  (["kernels", "--dry-run", "--budget-s", "-1"], 2, "argument --budget-s: -1 must be >= 0")],
    "make_gpu_corpus": [(["--workers", "0"], 2, "argument --workers: 0 must be >= 1"),  # accepted, built a corpus
                        (["--max-mb", "0"], 2, "argument --max-mb: 0 must be > 0")],
    "make_local_corpus": [(["--doc-chars", "0"], 2, "argument --doc-chars: 0 must be >= 1"),  # accepted
                          (["--max-mb", "0"], 2, "argument --max-mb: 0 must be > 0"),  # accepted
                          (["--files", "2"], 2, "--files must be >= 3")],
    "study": [(["nope_preset"], 2, "no study preset `nope_preset`"),
              (["quickstart", "--workers", "0"], 2, "argument --workers: 0 must be >= 1"),  # ran the study
              (["quickstart", "--seeds", "-1"], 2, "argument --seeds: -1 must be >= 0"),
              (["quickstart", "--sequential-seeds", "3:2"], 2, "seeds.max is 2: it must be >= start (3)"),
              (["quickstart", "--sequential-seeds", "3"], 2, "--sequential-seeds '3': write START:MAX or"),
              (["quickstart", "--seeds", "0", "--sequential-seeds", "3:5"], 2, "not allowed with argument")],
    "sweep": [(["/nonexistent.yaml"], 2, "config file /nonexistent.yaml does not exist"),
              (["/nonexistent.yaml", "--workers", "0"], 2, "argument --workers: 0 must be >= 1"),
              (["alibi_ppl", "--sequential-seeds", "3"], 2, "--sequential-seeds '3': write START:MAX or"),
              (["alibi_ppl", "--sequential-seeds", "3:2"], 2, "seeds.max is 2: it must be >= start (3)"),
              (["cpu_demo", "--sequential-seeds", "3:5"], 2, "this sweep has no `claims`")],
}
MAIN_CASES = [(name, i) for name, cases in MAINS.items() for i in range(len(cases))]


@pytest.mark.parametrize("name,i", MAIN_CASES, ids=[f"{n}-{i}" for n, i in MAIN_CASES])
def test_every_script_refuses_a_bad_argument_with_one_line(name, i, tmp_path, monkeypatch, capsys):
    from tests.cli.test_scripts import script

    argv, code, text = MAINS[name][i]
    bad = tmp_path / "results.json"
    bad.write_text("{not json")
    argv = [a.replace("{bad}", str(bad)).replace("{tmp}", str(tmp_path)) for a in argv]
    monkeypatch.chdir(tmp_path)  # a case that went on to work would write here, not into the repository
    threads = torch.get_num_threads()
    try:
        got = script(name).main(argv)
    except SystemExit as e:  # argparse's usage error
        got = e.code
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error: " in line]
    assert got == code and len(errors) == 1 and len(errors[0]) < 600, err
    assert text in errors[0], err
    assert not any(tmp_path.iterdir()) or {p.name for p in tmp_path.iterdir()} == {"results.json"}


def test_every_argparse_script_has_a_bad_argument_case():
    """A new script with flags gets a case above (or in CASES, run as a process)."""
    parsed = {p.stem for p in (ROOT / "scripts").glob("*.py") if "argparse" in p.read_text()
              or "posbench.cli." in p.read_text()}
    covered = set(MAINS) | {Path(argv[0]).stem for argv, _ in CASES.values()}
    unchecked = {"memory_model", "scale_hyperparams", "readme_blocks", "bench_threads"}  # hand tools, not users'
    assert parsed - covered - unchecked == set()


def test_bench_study_ab_prints_whether_the_conclusions_agree(tmp_path, monkeypatch, capsys):
    """--ab's last line reads compare()'s Agreement (it took it for a list of problems: a TypeError after both runs)."""
    from tests.cli.test_scripts import script

    bench = script("bench_study")
    numbers = {"wall_s": 1.0, "cpu_s": {"train": 1.0}}
    monkeypatch.setattr(bench, "measure", lambda *a: ("| table |", numbers))
    from tests.studies.test_study_compare import BASE, cells, typed

    monkeypatch.setattr(bench, "read_cells", lambda path: typed(cells(BASE)))
    assert bench.main(["--ab", "--cells", "1", "--out", str(tmp_path / "out")]) == 0
    assert "conclusions: the same" in capsys.readouterr().out
    monkeypatch.setattr(bench, "read_cells", lambda path: [])  # nothing judged is not "the same" (item 3)
    assert bench.main(["--ab", "--cells", "1", "--out", str(tmp_path / "out")]) == 0
    assert "conclusions: none to compare: no PE pair was judged in both runs" in capsys.readouterr().out


def test_bench_loss_memory_names_a_child_that_failed(monkeypatch, capsys):
    """A step that does not fit (--seq-len 100000000: 51 GB of logits) failed in the child, and the parent stopped
    with a CalledProcessError's traceback; now one line with the child's last error and what to shrink."""
    import subprocess as sp

    from tests.cli.test_scripts import script

    bench = script("bench_loss_memory")
    failed = sp.CompletedProcess([], 1, "", "Traceback ...\nRuntimeError: DefaultCPUAllocator: can't allocate memory\n")
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: failed)
    assert bench.main(["--size", "nano", "--chunks", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--chunks 0 failed in its subprocess (exit 1: RuntimeError: DefaultCPU" in err
    assert "a smaller --seq-len, --micro-batch or --size may fit" in err


@pytest.mark.slow  # three interpreters (launch.py starts train.py); the in-process cases above check the same mains
def test_compare_studies_and_launch_exit_2_as_processes(tmp_path):
    """The contract as a shell sees it: exit status 2, one line, no traceback."""
    for argv, text in ((["scripts/compare_studies.py", str(tmp_path / "a"), str(tmp_path / "b")],
                        f"{tmp_path / 'a'}: no results.json there"),
                       (["scripts/launch.py", "--model-size", "nope"], "no model preset `nope`")):
        proc = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
        errors = [line for line in proc.stderr.splitlines() if "error: " in line]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr
        assert text in errors[0], proc.stderr


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
