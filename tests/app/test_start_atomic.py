"""Starting a study from the app (item 12): a name that cannot name a directory is refused on the page, before Start;
two Starts of one name at the same moment start one study and tell the other why; the app's seeds are the study's
(item 13: -1 refused); a finished cell whose values are not finite numbers is refused where the app reads it
(item 2)."""

import json
import sys
import threading

import pytest
from streamlit.testing.v1 import AppTest

from posbench.app import background
from posbench.app.outputs import NotAnOutput, open_output, read_cells
from posbench.app.studyform import build_study
from posbench.errors import ConfigError
from tests.app.helpers import MAIN, TINY, cell


@pytest.mark.parametrize("name", ["x" * 300, "two words", "a:b", "-leading", "é" * 20])
def test_item12_a_name_that_cannot_name_a_run_directory_is_refused_by_the_form(name):
    """Item 12: a 300-character name passed the form, and Start raised an uncaught `File name too long`."""
    with pytest.raises(ConfigError, match="study name"):
        build_study({**TINY, "name": name})
    assert build_study({**TINY, "name": "a" * 100}).name == "a" * 100


def test_item12_the_page_says_so_and_start_stays_off(tmp_path, monkeypatch):
    monkeypatch.setenv("POSBENCH_APP_RUNS", str(tmp_path / "runs"))
    at = AppTest.from_file(MAIN, default_timeout=120).run()
    at.text_input(key="f_name").set_value("x" * 300).run()
    assert not at.exception
    assert any("Cannot start the study: study name" in e.value for e in at.error)
    assert at.button(key="start").disabled
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_item12_two_starts_at_once_start_one_study_and_refuse_the_other(tmp_path):
    """Item 12: two tabs pressing Start at the same moment for one name both got "started": one study was lost and
    its spec overwritten (the existence check and the start were not atomic)."""
    run = tmp_path / "tiny"
    studies = [build_study(TINY), build_study({**TINY, "steps": 5})]
    barrier, outcome = threading.Barrier(2), {}

    def press(i):
        barrier.wait()
        try:
            outcome[i] = background.start(studies[i], run)
        except background.StudyNameTaken as e:
            outcome[i] = e

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads interleave at every few bytecodes, as two page sessions may
    try:
        threads = [threading.Thread(target=press, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
        background.stop(run, grace_s=2)
    winner = [i for i, v in outcome.items() if v is True]
    assert len(winner) == 1, outcome
    loser = outcome[1 - winner[0]]
    assert isinstance(loser, background.StudyNameTaken) and "already holds another study" in str(loser)
    assert background.read_spec(run) == studies[winner[0]]


def test_item12_a_file_in_the_way_is_one_line(tmp_path):
    (tmp_path / "tiny").write_text("not a study")
    with pytest.raises(background.StudyNameTaken, match="not a study directory"):
        background.start(build_study(TINY), tmp_path / "tiny")
    assert (tmp_path / "tiny").read_text() == "not a study"


def test_item13_the_form_refuses_a_negative_seed():
    """Item 13: the app accepted seeds `-1`, which the task source refused only after the study's folders existed."""
    with pytest.raises(ConfigError, match="seeds must be integers >= 0"):
        build_study({**TINY, "seeds": "0, -1"})


def test_item2_the_app_refuses_a_cell_value_that_is_not_a_finite_number(tmp_path):
    """Item 2: the app read a NaN accuracy as a number and summarised it."""
    (tmp_path / "cells").mkdir()
    bad = {**cell("rope", 0, 0.5, 0.4), "id_acc": float("nan")}
    (tmp_path / "cells" / "k_back_rope_s0.json").write_text(json.dumps(bad))
    with pytest.raises(NotAnOutput, match=r"k_back_rope_s0.json: id_acc is nan, not a finite number"):
        read_cells(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"study": "s", "cells": [bad]}))
    with pytest.raises(NotAnOutput, match=r"results.json: cell 0: id_acc is nan, not a finite number"):
        open_output(tmp_path)
