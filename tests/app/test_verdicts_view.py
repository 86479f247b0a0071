"""The app shows a study's pair verdicts, as the report does."""

import json

from streamlit.testing.v1 import AppTest

from tests.app.helpers import MAIN, cell


def explore_tables(tmp_path, monkeypatch, beyond_of_seed) -> list[list[dict]]:
    """The tables Explore shows for a study of rope and alibi over seeds 0-2, `beyond_of_seed(s)` giving each PE's
    beyond-length accuracy at seed s."""
    monkeypatch.setenv("POSBENCH_APP_RUNS", str(tmp_path / "runs"))
    cells = [{**cell(pe, s, 1.0, beyond), "ood_beyond_acc": beyond}
             for s in range(3) for pe, beyond in beyond_of_seed(s).items()]
    study = tmp_path / "st"
    study.mkdir()
    (study / "results.json").write_text(json.dumps({"study": "v", "cells": cells}))
    at = AppTest.from_file(MAIN, default_timeout=120).run()
    at.sidebar.radio(key="page").set_value("Explore results").run()
    at.text_area(key="ex_paths").set_value(str(study)).run()
    assert not at.exception, [e.value for e in at.exception]
    return [t.value.to_dict("records") for t in at.table]


def test_explore_shows_the_reports_pair_verdicts(tmp_path, monkeypatch):
    """Item 6: a study opened in Explore shows each PE pair's difference and verdict after Holm (the
    report had them, the app did not). Beyond-length accuracy: rope 0.5, 0.6, 0.7 over seeds 0-2, alibi 0.9 on
    each."""
    tables = explore_tables(tmp_path, monkeypatch, lambda s: {"rope": 0.5 + 0.1 * s, "alibi": 0.9})
    verdict = next(t for t in tables if t and "verdict" in t[0])
    # by hand: differences alibi - rope per seed 40, 30, 20: mean 30, sd 10, t_2 4.303 -> [+5.2, +54.8]
    assert verdict == [{"task": "k_back", "pair": "alibi > rope", "difference, pts [95% t-interval]":
                        "+30.0 [+5.2, +54.8]", "verdict": "ordered"}]


def test_explore_shows_the_seeds_the_report_says_a_pair_needs(tmp_path, monkeypatch):
    """Item 6: the report's "seeds needed" (its seed calibration) stands beside the verdicts on the page. Beyond-
    length accuracy: rope 0.5, 0.6, 0.7 and alibi 0.55, 0.75, 0.65 over seeds 0-2. By hand: alibi - rope per seed
    +5, +15, -5 pts, mean 5, sd 10; a t test separates them once t_{0.975, n-1} x 10 / sqrt(n) < 5: n = 17 gives
    2.120 / 4.123 = 0.514 x 10, n = 18 gives 2.110 / 4.243 = 0.497 x 10, so 18 seeds."""
    tables = explore_tables(tmp_path, monkeypatch,
                            lambda s: {"rope": [0.5, 0.6, 0.7][s], "alibi": [0.55, 0.75, 0.65][s]})
    need = next(t for t in tables if t and "seeds needed (estimate)" in t[0])
    assert [(r["task"], r["best two PEs (beyond train length)"], r["separated now"], r["seeds needed (estimate)"])
            for r in need] == [("k_back", "alibi vs rope", "no", "18")]
