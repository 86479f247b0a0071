"""The app shows a study's pair verdicts, as the report does."""

import json

from streamlit.testing.v1 import AppTest

from tests.app.helpers import MAIN, cell


def test_explore_shows_the_reports_pair_verdicts(tmp_path, monkeypatch):
    """Item 6: a study opened in Explore shows each PE pair's difference and verdict after Holm (the
    report had them, the app did not). Beyond-length accuracy: rope 0.5, 0.6, 0.7 over seeds 0-2, alibi 0.9 on
    each."""
    monkeypatch.setenv("POSBENCH_APP_RUNS", str(tmp_path / "runs"))
    cells = []
    for s in range(3):
        for pe, beyond in (("rope", 0.5 + 0.1 * s), ("alibi", 0.9)):
            cells.append({**cell(pe, s, 1.0, beyond), "ood_beyond_acc": beyond})
    study = tmp_path / "st"
    study.mkdir()
    (study / "results.json").write_text(json.dumps({"study": "v", "cells": cells}))
    at = AppTest.from_file(MAIN, default_timeout=120).run()
    at.sidebar.radio(key="page").set_value("Explore results").run()
    at.text_area(key="ex_paths").set_value(str(study)).run()
    assert not at.exception, [e.value for e in at.exception]
    tables = [t.value.to_dict("records") for t in at.table]
    verdict = next(t for t in tables if t and "verdict" in t[0])
    # by hand: differences alibi - rope per seed 40, 30, 20: mean 30, sd 10, t_2 4.303 -> [+5.2, +54.8]
    assert verdict == [{"task": "k_back", "pair": "alibi > rope", "difference, pts [95% t-interval]":
                        "+30.0 [+5.2, +54.8]", "verdict": "ordered"}]
