"""A stop signal is never dropped: one during the steps stops the run at the next step (test_loop, test_torchrun);
one after the last step's check (the final checkpoint) leaves the run complete and comes back as `late_signal`, so
a sweep stops after that run instead of starting the next; an ignored SIGINT (a non-interactive shell's background
job) stays ignored. Real signals to this process; the save they arrive in is the loop's own, wrapped."""

import json
import os
import signal
from pathlib import Path

import pytest

from posbench.config_loader import load
from posbench.sweeps.execute import PretrainCell, done_path
from posbench.sweeps.sweep_spec import SweepConfig, plan_runs
from posbench.training import checkpoint as ckpt
from posbench.training import end_of_step
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from tests.training.helpers import nano_config

pytestmark = [pytest.mark.skipif(os.name != "posix", reason="POSIX signals"),
              pytest.mark.usefixtures("terminal_sigint")]

SOURCE = RandomTokens(512, 64)


def signal_during(monkeypatch, kind: str, sig=signal.SIGINT, nth: int = 1) -> list[str]:
    """Send `sig` to this process while the `nth` checkpoint of `kind` is saved; returns the kinds saved."""
    real, saved = end_of_step.save, []

    def save(run, k):
        saved.append(k)
        real(run, k)
        if k == kind and saved.count(kind) == nth:
            os.kill(os.getpid(), sig)  # delivered here: the flag's handler runs before the next bytecode

    monkeypatch.setattr(end_of_step, "save", save)
    return saved


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_final_checkpoint_completes_the_run_and_is_returned(tmp_path, monkeypatch, capsys, sig):
    before = signal.getsignal(sig)
    signal_during(monkeypatch, "final", sig)
    out = train(nano_config(tmp_path), SOURCE)  # no KeyboardInterrupt: the flag's handler took it
    assert out["stopped"] is False and out["step"] == 32 and out["late_signal"] == sig
    assert json.loads((ckpt.latest_path(Path(out["run_dir"])) / "meta.json").read_text())["kind"] == "final"
    assert signal.getsignal(sig) is before
    assert f"{signal.Signals(sig).name} arrived after the last step: the run is complete" in capsys.readouterr().err


def test_a_run_without_a_signal_returns_none_and_a_signal_mid_run_stops_it(tmp_path, monkeypatch):
    assert train(nano_config(tmp_path, "train.run_name=quiet"), SOURCE)["late_signal"] is None
    signal_during(monkeypatch, "periodic")  # at step 8: the flag stops the run at step 9
    out = train(nano_config(tmp_path, "train.run_name=stopped"), SOURCE)
    assert out["stopped"] is True and out["step"] == 9


def test_an_ignored_sigint_stays_ignored_through_the_run(tmp_path, monkeypatch):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        signal_during(monkeypatch, "periodic")  # the same signal that stops the run above
        out = train(nano_config(tmp_path), SOURCE)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert out["stopped"] is False and out["step"] == 32 and out["late_signal"] is None


def test_a_sweep_keeps_the_run_a_late_signal_finished_and_stops_after_it(tmp_path, monkeypatch):
    sweep = load(SweepConfig, overrides=[{"pes": [{"name": "rope"}], "seeds": [0], "run": {
        "model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "seq_len": 64},
        "train": {"stream": "random", "budget_unit": "tokens", "target_budgets": [4096],
                  "global_batch_tokens": 512, "micro_batch": 8, "device": "cpu"},
        "logging": {"wandb": "disabled"}}}])
    cell = PretrainCell(plan_runs(sweep, tmp_path)[0])
    signal_during(monkeypatch, "final")
    with pytest.raises(KeyboardInterrupt, match="finished; stopped by a signal after its last step"):
        cell.run(tmp_path, log=lambda line: None)
    assert cell.is_done(tmp_path)
    assert json.loads(done_path(tmp_path, cell.item).read_text())["late_signal"] == signal.SIGINT
