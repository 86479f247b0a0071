"""Explore opens a sweep's output folder whole: its runs' evaluations side by side and its report."""

import json

from streamlit.testing.v1 import AppTest

from posbench.app.outputs import EvalOutput, open_output
from tests.app.helpers import MAIN, eval_payload

REPORT = ("# Sweep `tiny`\n\nPerplexity by context length, mean over seeds (hand-written here).\n\n## Plots\n\n"
          "![ppl](plots/ppl.png)\n![outside](../elsewhere.png)\n")
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082")  # 1 x 1 pixel


def write_sweep(root):
    """A sweep's output as `posbench sweep` leaves it: report.md beside eval/<run>/results.json."""
    for label, ppl, needle in (("nano_rope_s0", [10.0, 12.0], [1.0, 0.5]),
                               ("nano_alibi_s0", [11.0, 11.5], [1.0, None])):
        d = root / "eval" / label
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps(eval_payload(label, ppl, needle)))
    (root / "report.md").write_text(REPORT)
    (root / "plots").mkdir()
    (root / "plots" / "ppl.png").write_bytes(PNG)
    (root.parent / "elsewhere.png").write_bytes(PNG)
    (root / "logs").mkdir()
    return root


def test_a_sweep_folder_opens_as_its_runs_and_its_report(tmp_path):
    """Item 6: a sweep folder was refused ("not a study or eval output"): each eval/<run> had to be
    opened alone."""
    out = open_output(write_sweep(tmp_path / "sweep"))
    assert isinstance(out, EvalOutput) and out.reports == [tmp_path / "sweep" / "report.md"]
    assert sorted(p["label"] for p in out.payloads) == ["nano_alibi_s0", "nano_rope_s0"]


def test_explore_shows_a_sweeps_runs_side_by_side_and_its_report(tmp_path, monkeypatch):
    """Item 6, on the page: the sweep's runs in one perplexity chart and its report.md below."""
    monkeypatch.setenv("POSBENCH_APP_RUNS", str(tmp_path / "runs"))
    write_sweep(tmp_path / "sweep")
    at = AppTest.from_file(MAIN, default_timeout=120).run()
    at.sidebar.radio(key="page").set_value("Explore results").run()
    at.text_area(key="ex_paths").set_value(str(tmp_path / "sweep")).run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert {t["name"]: t["y"] for t in charts[0]["data"]} == {"nano_alibi_s0": [11.0, 11.5],
                                                             "nano_rope_s0": [10.0, 12.0]}
    assert any("Perplexity by context length, mean over seeds (hand-written here)." in m.value
               for m in at.markdown)
    # the report's own figure is shown; a link out of the sweep folder stays text, its file unread
    assert len(at.get("image")) == 1
    assert any("![outside](../elsewhere.png)" in m.value for m in at.markdown)
