"""Settings that would silently not do what the run's name says are refused before work (exit 2): a DroPE drop
point after the last step's start (the run trained RoPE to its end, `dropped: false`, yet labelled drope), and a
sliding window longer than any sequence a model here can run (full attention under a `_win...` name). A run resumed
past its drop says when the drop happened, as the checkpoint records it."""

import contextlib
import io
import json
from pathlib import Path

import pytest

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.training import checkpoint as ckpt
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from posbench.training.plan import make_plan
from tests.training.helpers import nano_config

SOURCE = RandomTokens(512, 64)


def _plan(*extra):
    return make_plan(nano_config("unused", "pe.name=drope", *extra), 1, "cpu")


@pytest.mark.parametrize("extra,setting,share", [
    (["train.target_budgets=[1024]"], "pe.drop_at=0.8", "0.5"),  # 2 steps: 819 tokens is after step 2 starts (512)
    (["train.target_budgets=[2048]", "pe.drop_at=0.99"], "pe.drop_at=0.99", "0.75"),
])
def test_a_drop_after_the_last_step_starts_is_refused(extra, setting, share):
    with pytest.raises(ConfigError, match=f"{setting} switches the PE") as e:
        _plan(*extra, "schedule.warmup_tokens=0")
    assert "the last step at which the switch can happen is step" in str(e.value) and f"<= {share}" in str(e.value)


def test_a_drop_at_the_last_step_start_is_accepted():
    plan = _plan("train.target_budgets=[2048]", "pe.drop_at=0.75", "schedule.warmup_tokens=0")
    assert plan.drop_pe_tokens == 1536


def test_the_train_command_exits_2_before_any_file(tmp_path):
    from posbench.cli.main import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["train", "--model-size", "nano", "pe.name=drope", "model.seq_len=64", "train.stream=random",
                     "train.budget_unit=tokens", "train.target_budgets=[1024]", "train.global_batch_tokens=512",
                     "train.micro_batch=2", "logging.wandb=disabled", "data.tokenizer.name=bytes",
                     "model.vocab_size=512", f"train.out_dir={tmp_path / 'out'}"])
    assert code == 2 and err.getvalue().count("\n") == 1 and "never switch" in err.getvalue(), err.getvalue()
    assert not (tmp_path / "out").exists()


def test_a_resume_past_the_drop_reports_the_recorded_drop_point(tmp_path, capsys):
    """2048 tokens at 512 a step, dropped at 1024 (before step 3): stopped after step 3, resumed at 1536 tokens."""
    extra = ["pe.name=drope", "pe.drop_at=0.5", "train.target_budgets=[2048]", "train.run_name=d"]
    train(nano_config(tmp_path, *extra, "train.max_steps=3"), SOURCE)
    capsys.readouterr()
    out = train(nano_config(tmp_path, *extra, "train.resume=auto"), SOURCE)
    said = capsys.readouterr().err
    assert "the PE switched at 1,024 tokens (pe.drop_at, as the checkpoint records); resumed at 1,536 tokens" \
        in said, said
    meta = json.loads((ckpt.step_dir(Path(out["run_dir"]), 4) / "meta.json").read_text())
    assert meta["pe_dropped_at_tokens"] == 1024


@pytest.mark.parametrize("override", ["model.attention_window=4611686018427387904",
                                      "model.attention_window=[8,16777217]", "pe.window=4611686018427387904"])
def test_a_window_longer_than_any_sequence_is_refused(override):
    extra = ["pe.name=rnope_swa", "pe.swa_layers=1"] if override.startswith("pe.") else []
    with pytest.raises(ConfigError, match="longer than any sequence a model here can run.*give null"):
        load_config(model_size="nano", overrides=[*extra, override])
    load_config(model_size="nano", overrides=[*extra, override.split("=")[0] + "=16777216"])  # 2**24: accepted
