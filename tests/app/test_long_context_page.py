"""The Explore page shows the long_context suite: the effective-length table, and a chosen family's heatmap
per checkpoint."""

import json

from streamlit.testing.v1 import AppTest

from tests.app.helpers import MAIN, eval_payload


def with_long_context(label, multikey):
    payload = eval_payload(label, [10.0, 11.0], [1.0, 1.0])
    cells = [{"length": L, "depth": 0.5, "accuracy": a, "na": None if a is not None else "too long"}
             for L, a in zip([16, 32], multikey)]
    fam = {"lengths": [16, 32], "depths": [0.5], "cells": cells,
           "effective": {"length": 16, "na": None, "limit": "32 tokens scores 0.0%"}}
    kv = {"lengths": [16, 32], "depths": [0.0], "cells": [{"length": 16, "depth": 0.0, "accuracy": 0.5, "na": None},
                                                         {"length": 32, "depth": 0.0, "accuracy": 0.5, "na": None}],
          "effective": {"length": None, "na": "the in-distribution score 50.0% is not above the baseline 50.0%",
                        "limit": None}}
    payload["suites"]["long_context"] = {"keep": 0.8, "families": {"niah_multikey": fam, "kv_retrieval": kv},
                                         "mean": {"effective": {"length": 32, "na": None,
                                                                "limit": "passes at every tested length"}}}
    return payload


def test_explore_shows_effective_length_and_family_heatmaps(tmp_path, monkeypatch):
    monkeypatch.setenv("POSBENCH_APP_RUNS", str(tmp_path / "runs"))
    for label, mk in (("rope", [1.0, 0.0]), ("alibi", [1.0, None])):
        d = tmp_path / "cmp" / label
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps(with_long_context(label, mk)))
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    at.sidebar.radio(key="page").set_value("Explore results").run()
    at.text_area(key="ex_paths").set_value(str(tmp_path / "cmp")).run()
    assert not at.exception and not at.error
    rows = {r["family"]: r for r in at.table[0].value.to_dict("records")}
    assert rows["niah_multikey"]["rope"] == "16" and rows["mean of families"]["alibi"] == ">= 32"
    # a family n/a for every checkpoint leaves the table and is said once, with its reason once
    assert "kv_retrieval" not in rows
    assert [c.value for c in at.caption if "kv_retrieval" in c.value] == [
        "kv_retrieval: n/a for every checkpoint (the in-distribution score 50.0% is not above the baseline 50.0%)"]
    def heatmaps():
        specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
        return [(s["layout"]["title"]["text"], s["data"][0]["z"]) for s in specs if "z" in s["data"][0]]
    # niah's own heatmaps first ([[100, 100]]), then the chosen family's (niah_multikey, the first)
    assert dict(heatmaps()[-2:]) == {"rope": [[100.0, 0.0]], "alibi": [[100.0, None]]}
    at.selectbox(key="ex_lc_family").set_value("kv_retrieval").run()
    assert dict(heatmaps()[-2:]) == {"rope": [[50.0, 50.0]], "alibi": [[50.0, 50.0]]}


def test_a_checkpoint_na_in_every_family_is_one_note_not_a_column():
    from posbench.app.long_context_view import collapse_na

    rows = [{"family": "a", "rope": "16", "nope": "n/a (too short)"},
            {"family": "b", "rope": "n/a (x)", "nope": "n/a (too short)"},
            {"family": "c", "rope": "n/a (y)", "nope": "n/a (too short)"}]
    kept, notes = collapse_na(rows)
    assert kept == [{"family": "a", "rope": "16"}]
    assert notes == ["b: n/a for every checkpoint (x; too short)", "c: n/a for every checkpoint (y; too short)",
                     "nope: n/a in every family (too short)"]
