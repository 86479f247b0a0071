"""An error carries its exit code (a design rule): a PosbenchError is one line `error: ...` and its code;
anything else is a bug and keeps its traceback (exit code 1), a missing file inside our own code included."""

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from posbench.cli.errors_cli import cli_entry, exit_code
from posbench.errors import (
    CheckpointError,
    ConfigError,
    DataError,
    DiskFullError,
    DownloadError,
    NonFiniteError,
    PosbenchError,
    ShardError,
    UserPathError,
    user_path_error,
    user_paths,
)

ROOT = Path(__file__).resolve().parents[2]
BAD_INPUT_CODES = {2, 3, 4, 5}


@pytest.mark.parametrize("error, code", [
    (ConfigError("model.d_modle: did you mean `d_model`?"), 2),
    (DataError("shard x.bin: truncated"), 2),
    (ShardError("shard x.bin: bad header"), 2),
    (DownloadError("https://x: 503"), 2),
    (UserPathError(20, "Not a directory", "f/sub"), 2),
    (NonFiniteError("non-finite loss at step 5 on rank 0"), 3),
    (CheckpointError("checkpoint ck/step_1 is corrupt"), 4),
    (DiskFullError("could not write checkpoint (disk full)"), 5),
    (OSError(errno.ENOSPC, "No space left on device", "out/x.bin"), 5),  # never our bug, wherever it is written
])
def test_an_expected_failure_is_one_line_and_its_code(capsys, error, code):
    @cli_entry
    def main(argv):
        raise error

    assert main([]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {str(error).splitlines()[0]}") and "Traceback" not in err


@pytest.mark.parametrize("error", [RuntimeError("boom"), ValueError("bad"), KeyError("k"), TypeError("t"),
                                   FileNotFoundError(2, "No such file or directory", "metrics.jsonl"),
                                   OSError(errno.EACCES, "Permission denied", "x")])
def test_anything_else_is_a_bug_and_re_raises(error):
    @cli_entry
    def main(argv):
        raise error

    assert exit_code(error) is None
    with pytest.raises(type(error)):
        main([])


def test_classes_keep_their_builtin_bases_and_old_homes():
    """Callers that catch the builtin (or import from where the class lived) keep working."""
    assert issubclass(ConfigError, ValueError) and issubclass(DataError, RuntimeError)
    assert issubclass(CheckpointError, ConfigError) and issubclass(CheckpointError, RuntimeError)
    assert issubclass(DiskFullError, CheckpointError) and issubclass(NonFiniteError, RuntimeError)
    assert issubclass(UserPathError, OSError)
    assert all(issubclass(c, PosbenchError) for c in (ConfigError, DataError, CheckpointError, NonFiniteError))


def test_a_users_path_keeps_the_os_message_and_errno():
    e = user_path_error(NotADirectoryError(errno.ENOTDIR, "Not a directory", "f/sub/run"))
    assert isinstance(e, UserPathError) and e.errno == errno.ENOTDIR
    assert str(e) == "[Errno 20] Not a directory: 'f/sub/run'"
    named = user_path_error(PermissionError(errno.EACCES, "Permission denied", "out"), "--out")
    assert str(named) == "--out: [Errno 13] Permission denied: 'out'" and named.errno == errno.EACCES
    assert isinstance(user_path_error(OSError(errno.ENOSPC, "No space left on device")), DiskFullError)
    with pytest.raises(UserPathError) as info, user_paths():
        (Path(os.devnull) / "sub").mkdir()
    assert isinstance(info.value.__cause__, OSError) and not isinstance(info.value.__cause__, PosbenchError)
    with pytest.raises(ConfigError), user_paths():  # already classified: passes through as it is
        raise ConfigError("x")


def run_patched(tmp_path, patch: str, argv: list[str]) -> subprocess.CompletedProcess:
    """`python -m posbench ARGV` with `patch` applied first (a function the command calls made to fail)."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(patch) + f"\nfrom posbench.cli import main\nraise SystemExit(main({argv!r}))\n")
    env = {**os.environ, "POSBENCH_DEBUG": "0", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


MISSING_FILE = """
    import posbench.data.info as info

    def describe(cfg, verify=False):  # our own code opens a file it should have written: a bug
        open("metrics.jsonl").read()

    info.describe = describe
"""
PLAIN_RUNTIME_ERROR = """
    import posbench.training.loop as loop

    def train(cfg, source, snapshots=None):
        raise RuntimeError("an internal invariant broke")

    loop.train = train
"""


@pytest.mark.parametrize("patch, argv, name", [
    (MISSING_FILE, ["data", "info", "data.tokenizer.name=bytes"], "FileNotFoundError"),
    (PLAIN_RUNTIME_ERROR, ["train", "--model-size", "nano", "train.stream=random", "logging.wandb=disabled"],
     "RuntimeError: an internal invariant broke"),
])
def test_a_bug_inside_a_command_shows_its_traceback(tmp_path, patch, argv, name):
    proc = run_patched(tmp_path, patch, argv)
    assert proc.returncode not in BAD_INPUT_CODES and proc.returncode == 1, proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr and name in proc.stderr
    assert not any(line.startswith("error: ") for line in proc.stderr.splitlines())


def test_a_posbench_error_inside_a_command_is_one_line(tmp_path):
    patch = """
        import posbench.data.info as info
        from posbench.errors import CheckpointError

        def describe(cfg, verify=False):
            raise CheckpointError("checkpoint ck/step_1 is corrupt")

        info.describe = describe
    """
    proc = run_patched(tmp_path, patch, ["data", "info", "data.tokenizer.name=bytes"])
    assert proc.returncode == 4 and proc.stderr == "error: checkpoint ck/step_1 is corrupt\n", proc.stderr


NANO = ["--model-size", "nano", "model.seq_len=64", "model.vocab_size=512", "data.tokenizer.name=bytes",
        "train.stream=random", "train.budget_unit=tokens", "train.target_budgets=[1024]",
        "train.global_batch_tokens=512", "train.micro_batch=2", "logging.wandb=disabled", "schedule.warmup_tokens=0",
        "train.out_dir=o"]


@pytest.mark.parametrize("env, code, text", [
    ({"POSBENCH_INJECT_NAN": "1,0"}, 3, "non-finite"),
    ({"POSBENCH_ENOSPC_DURING_SAVE": "2"}, 5, "disk full"),
])
def test_train_py_exits_with_the_documented_code(tmp_path, env, code, text):
    """The real failures, end to end: a diverged loss (3) and a full disk during the final checkpoint (5)."""
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), *NANO], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180, env={**os.environ, "POSBENCH_DEBUG": "0", "OMP_NUM_THREADS": "1",
                                                       **env})
    assert proc.returncode == code, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and text in last and "Traceback" not in proc.stderr
