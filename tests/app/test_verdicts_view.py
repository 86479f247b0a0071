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


def test_a_sequential_studys_verdicts_are_its_looks_not_the_fixed_test_on_all_its_seeds(tmp_path):
    """The app shows what the report shows: a sequential study's verdict kept from the look that reached it.
    learned - alibi per seed: +10.0, +10.1, +9.9 pts at the first look (3 seeds: decided, kept), then -30, +50: the
    fixed test on all 5 seeds is inconclusive; the rope pairs stay undecided, so every row runs to max (5)."""
    import dataclasses

    from posbench.app.views.verdicts import verdict_table
    from tests.studies.test_sequential_seeds import cells, study

    s = study(tmp_path)
    held = cells({"learned": [0.50, 0.51, 0.52, 0.30, 0.70], "alibi": [0.40, 0.409, 0.421, 0.60, 0.20],
                  "rope": [0.30, 0.60, 0.45, 0.50, 0.40]})
    words = {r["pair"]: r["verdict"] for r in verdict_table(held, s)}
    assert words == {"learned > alibi": "ordered", "learned vs rope": "inconclusive", "alibi vs rope": "inconclusive"}
    fixed = {r["pair"]: r["verdict"] for r in verdict_table(held, dataclasses.replace(s, sequential=None))}
    assert fixed["learned vs alibi"] == "inconclusive"


def test_the_app_opens_a_published_result_and_a_cli_studys_folder_with_their_spec(tmp_path):
    """A published result folder (results/<name>/) opens in the app, and a study run from the command line (no
    spec.json of the app's) is read with the spec its result/study.json keeps: both show the looks' verdicts."""
    import json

    from posbench.app.outputs import open_output
    from posbench.app.views.verdicts import verdict_table
    from posbench.studies.published import write_result
    from tests.studies.test_sequential_seeds import cells, study

    s = study(tmp_path)
    held = cells({"learned": [0.50, 0.51, 0.52, 0.30, 0.70], "alibi": [0.40, 0.409, 0.421, 0.60, 0.20],
                  "rope": [0.30, 0.60, 0.45, 0.50, 0.40]})
    folder = write_result(tmp_path / "out", held, s, "posbench study seq.yaml", 1.0, 1.0)
    (tmp_path / "out" / "results.json").write_text(json.dumps({"study": "seq", "cells": [c.to_data() for c in held]}))
    for path in (folder, tmp_path / "out"):
        out = open_output(path)
        assert out.study.sequential == s.sequential, path
        assert {r["pair"]: r["verdict"] for r in verdict_table(out.cells, out.study)}["learned > alibi"] == "ordered"
