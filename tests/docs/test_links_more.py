"""Links planted where the app keeps a study's own files (runner.lock, runner.log, runner.pid, status.json,
spec.json) or above where eval writes its results (a run directory's `eval/` pointing elsewhere) are neither
written nor read through: refused with LinkError (exit 2) naming the link, the file outside byte for byte
untouched. Bounded reads: metrics.jsonl past its limit and a .jsonl corpus of one huge line are refused with a
clear error before they are read whole."""

from __future__ import annotations

import json
import os

import pytest

from posbench.app import background, runner_files, worker
from posbench.app.app_paths import LOCK, LOG, PID, SPEC, STATUS
from posbench.app.studyform import build_study
from posbench.config_loader import to_dict
from posbench.errors import EXIT_BAD_INPUT, DataError
from posbench.fileio import LinkError, no_link_below
from tests.app.helpers import TINY
from tests.docs.test_links import SECRET, plant, untouched


@pytest.fixture
def victim(tmp_path):
    """A file outside every posbench folder that a planted link points at (as in test_links.py)."""
    path = tmp_path / "outside" / "victim.txt"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    return path


def study_dir(tmp_path):
    """A run directory as background.start leaves it, without starting a worker."""
    run = tmp_path / "runs" / "tiny"
    run.mkdir(parents=True)
    (run / SPEC).write_text(json.dumps(to_dict(build_study(TINY)), sort_keys=True, indent=1))
    return run


@pytest.mark.parametrize("name", [LOCK, PID, STATUS, SPEC])
def test_the_page_never_reads_the_apps_files_through_a_link(tmp_path, victim, name):
    run = study_dir(tmp_path)
    victim.write_text(json.dumps({"state": "finished"}) if name == STATUS else
                      (run / SPEC).read_text() if name == SPEC else "1")  # readable as what it replaces
    secret = victim.read_bytes()
    (run / name).unlink(missing_ok=True)
    plant(run / name, victim)
    with pytest.raises(LinkError, match=f"{run / name} is a symbolic link") as err:
        background.state(run)
    assert err.value.exit_code == EXIT_BAD_INPUT
    assert victim.read_bytes() == secret


def test_the_worker_never_locks_nor_logs_through_a_link(tmp_path, victim, monkeypatch):
    run = study_dir(tmp_path)
    plant(run / LOCK, victim)
    with pytest.raises(LinkError, match="runner.lock is a symbolic link"):
        worker.main(str(run))
    os.unlink(run / LOCK)
    plant(run / LOG, victim)
    spawned = []
    monkeypatch.setattr(background.subprocess, "Popen", lambda *a, **k: spawned.append(a))
    with pytest.raises(LinkError, match="runner.log is a symbolic link"):
        background.start(build_study(TINY), run)
    assert not spawned and untouched(victim)


def test_oversized_app_files_are_refused_unread(tmp_path):
    run = study_dir(tmp_path)
    (run / STATUS).write_text(json.dumps({"state": "failed", "error": "x" * (runner_files.MAX_SMALL_BYTES + 1)}))
    with pytest.raises(DataError, match=r"status.json: 65,5\d\d bytes is more than a status file holds"):
        background.state(run)


def test_a_run_dirs_eval_folder_linked_elsewhere_is_refused(tmp_path, victim):
    from posbench.evaluation.eval_config import load_eval_config
    from posbench.evaluation.eval_runner import run_eval
    from tests.evaluation.helpers import nano_checkpoint

    run = nano_checkpoint(tmp_path / "ckpt", "rope")
    elsewhere = victim.parent
    plant(run / "eval", elsewhere)
    cfg = load_eval_config(overrides=["suites=[passkey]", "lengths=[64]"])
    with pytest.raises(LinkError, match=f"{run / 'eval'} is a symbolic link"):
        run_eval([str(run / "latest")], cfg, log=lambda *_: None)
    assert untouched(victim)
    # the folder the user names may be a link; only what we create below it is checked
    assert no_link_below(run, run) == run
    os.unlink(run / "eval")
    (run / "eval").mkdir()
    plant(run / "eval" / "latest", elsewhere)
    with pytest.raises(LinkError, match="latest is a symbolic link"):
        no_link_below(run, run / "eval" / "latest" / "sub")


def test_a_jsonl_corpus_of_one_huge_line_is_refused_unread(tmp_path, monkeypatch):
    from posbench.data.readers import JsonlReader, reader_for

    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": "y" * 5000}) + "\n")
    monkeypatch.setattr(JsonlReader, "max_line_bytes", 1000)
    reader = reader_for(path)
    reader.check()  # the first record is fine
    with pytest.raises(DataError, match=r"corpus.jsonl:2: a line longer than 1,000 bytes; one record per line"):
        list(reader.batches())
    monkeypatch.setattr(JsonlReader, "max_line_bytes", 6000)
    assert [t for batch in reader_for(path).batches() for t in batch] == ["fine", "y" * 5000]


def test_metrics_jsonl_past_its_limit_is_refused_unread(tmp_path, monkeypatch, victim):
    from posbench.training import loggers

    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1, "tokens": 8, "loss": 2.0}) + "\n")
    assert loggers.read_history(path, 100) == [{"step": 1, "tokens": 8, "loss": 2.0}]
    monkeypatch.setattr(loggers, "METRICS_MAX_BYTES", 10)
    with pytest.raises(DataError, match=r"metrics.jsonl: \d\d bytes is more than a metrics.jsonl holds"):
        loggers.read_history(path, 100)
    path.unlink()
    plant(path, victim)
    with pytest.raises(LinkError):
        loggers.read_history(path, 100)
    assert victim.read_bytes() == SECRET
