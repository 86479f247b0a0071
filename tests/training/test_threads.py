"""The thread count is a setting of the run (train.threads, eval --threads), never the machine's load, and a
resume keeps the count the checkpoint was trained with, so it continues bit for bit."""

import json
from pathlib import Path

import pytest
import torch

from posbench.cli.eval import flag_overrides, parser
from posbench.errors import ConfigError
from posbench.evaluation.eval_config import load_eval_config
from posbench.procpool import POOL_THREADS_ENV
from posbench.threads import choose_threads
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from tests.training.helpers import losses, nano_config

SOURCE = RandomTokens(512, 64)


@pytest.fixture(autouse=True)
def no_launcher_setting(monkeypatch):
    for name in ("OMP_NUM_THREADS", POOL_THREADS_ENV, "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)  # the rest of the session keeps its count


def meta_threads(run_dir) -> int:
    return json.loads((Path(run_dir) / "latest" / "meta.json").read_text())["threads"]


def test_auto_is_one_thread_and_honours_what_a_launcher_set(monkeypatch):
    assert choose_threads("auto") == (1, "")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert choose_threads("auto") == (3, "")
    monkeypatch.setenv(POOL_THREADS_ENV, "2")  # a process pool's share per worker wins
    assert choose_threads("auto") == (2, "")
    assert choose_threads(4) == (4, "")


def test_a_default_run_trains_on_one_thread_and_records_it(tmp_path):
    torch.set_num_threads(2)  # torch's own default on a 2-core machine
    out = train(nano_config(tmp_path, "train.max_steps=3"), SOURCE)
    assert torch.get_num_threads() == 1
    assert meta_threads(out["run_dir"]) == 1


def test_resume_with_auto_keeps_the_checkpoints_count_and_is_bit_identical(tmp_path):
    full = train(nano_config(tmp_path, "train.run_name=full", "train.threads=2"), SOURCE)
    part = train(nano_config(tmp_path, "train.run_name=part", "train.threads=2", "train.max_steps=11"), SOURCE)
    torch.set_num_threads(1)
    rest = train(nano_config(tmp_path, "train.run_name=part", "train.resume=auto"), SOURCE)  # threads: auto
    assert rest["step"] == full["step"]
    assert torch.get_num_threads() == 2 and meta_threads(part["run_dir"]) == 2
    a, b = losses(full["run_dir"]), losses(part["run_dir"])
    assert sorted(a) == sorted(b) and all(a[s] == b[s] for s in a)


def test_an_explicit_other_count_on_resume_says_so(tmp_path, capsys):
    train(nano_config(tmp_path, "train.threads=2", "train.max_steps=4"), SOURCE)
    train(nano_config(tmp_path, "train.threads=1", "train.resume=auto", "train.max_steps=6"), SOURCE)
    said = capsys.readouterr()
    assert "where the checkpoint was trained with 2" in said.out + said.err


def test_threads_settings_are_checked_and_eval_has_the_flag():
    with pytest.raises(ConfigError, match="train.threads"):
        nano_config("x", "train.threads=0")
    with pytest.raises(ConfigError, match="auto"):
        nano_config("x", "train.threads=many")
    args = parser().parse_args(["ckpt", "--threads", "3"])
    assert load_eval_config([], flag_overrides(args)).threads == 3
    assert load_eval_config([], []).threads == "auto"
