"""The app's pages through Streamlit's AppTest (the script runs for real, without a browser): opening
outputs from disk, bad input as messages in the page, the run form's validation."""

import json

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.helpers import MAIN, eval_payload, pe_traces, write_study


@pytest.fixture
def app(tmp_path, monkeypatch):
    monkeypatch.setenv("POSBENCH_APP_RUNS", str(tmp_path / "runs"))
    return AppTest.from_file(MAIN, default_timeout=120)


def explore(at, paths: str):
    at.run()
    at.sidebar.radio(key="page").set_value("Explore results").run()
    at.text_area(key="ex_paths").set_value(paths).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_study_from_disk_summary_by_hand(app, tmp_path):
    at = explore(app, str(write_study(tmp_path / "hand")))
    assert not at.error
    rows = {r["PE"]: r for r in at.table[0].value.to_dict("records")}
    # rope ID over seeds: (50 + 70) / 2 = 60; two seeds give no interval (the t-interval needs three:
    # docs/statistics.md), and the table says so rather than print one
    assert rows["rope"]["ID acc % [95% t-interval]"] == "60.0 [no interval]"
    assert rows["alibi"]["ID acc % [95% t-interval]"] == "90.0 [no interval]"
    assert rows["rope"]["OOD beyond train length % [95% t-interval]"] == "n/a"  # the key is absent from these cells
    # these cells have no beyond-length accuracy: their gap is against all positions, and the table says so
    assert rows["alibi"]["gap (ID - OOD beyond train length, pts) [95% t-interval]"] == \
        "5.0 [no interval] (vs OOD all positions)"
    # the learning curve leads with the beyond-length accuracy: n/a in these cells, said in the chart
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert "OOD beyond train length" in fig["layout"]["title"]["text"]
    assert [a["text"] for a in fig["layout"]["annotations"]][0].startswith("n/a")
    # all positions, labelled so: one trace per PE, mean over seeds at each step ((0.4+0.6)/2 = 0.5 at step 10)
    at.radio(key="ex0_split").set_value("OOD, all positions").run()
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert "OOD, all positions" in fig["layout"]["title"]["text"]
    traces = {t["name"]: t for t in pe_traces(fig)}
    assert sorted(traces) == ["alibi", "rope"] and traces["rope"]["y"] == pytest.approx([25.0, 50.0])
    # switching a PE off removes its trace
    at.multiselect(key="ex0_pes_alibi_rope").set_value(["alibi"]).run()
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert [t["name"] for t in pe_traces(fig)] == ["alibi"]


def test_a_pe_whose_cells_finish_later_joins_the_charts(app, tmp_path):
    out = write_study(tmp_path / "growing")
    payload = json.loads((out / "results.json").read_text())
    everything = payload["cells"]
    payload["cells"] = [c for c in everything if c["pe"] == "rope"]  # as while the alibi cells still run
    (out / "results.json").write_text(json.dumps(payload))
    at = explore(app, str(out))
    assert [t["name"] for t in pe_traces(json.loads(at.get("plotly_chart")[0].proto.spec))] == ["rope"]
    payload["cells"] = everything
    (out / "results.json").write_text(json.dumps(payload))
    at.run()
    assert sorted(t["name"] for t in pe_traces(json.loads(at.get("plotly_chart")[0].proto.spec))) == ["alibi",
                                                                                                 "rope"]


def test_not_an_output_is_a_message(app, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.json").write_text("{not json")
    at = explore(app, f"{tmp_path / 'empty'}\n{tmp_path / 'bad.json'}\n{tmp_path / 'missing'}")
    messages = [e.value for e in at.error]
    assert len(messages) == 3
    assert "is not a study or eval output" in messages[0] and "empty" in messages[0]
    assert "bad.json: unreadable JSON" in messages[1]
    assert "missing: no such file or directory" in messages[2]


def test_eval_outputs_side_by_side(app, tmp_path):
    for label, ppl, needle in (("rope", [10.0, 12.0], [1.0, 0.5]), ("alibi", [11.0, 11.5], [1.0, None])):
        d = tmp_path / "cmp" / label
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps(eval_payload(label, ppl, needle)))
    at = explore(app, str(tmp_path / "cmp"))
    assert not at.error
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    ppl = {t["name"]: t["y"] for t in charts[0]["data"]}
    assert ppl == {"alibi": [11.0, 11.5], "rope": [10.0, 12.0]}
    heat = {c["layout"]["title"]["text"]: c["data"][0]["z"] for c in charts[1:3]}
    assert heat == {"alibi": [[100.0, None]], "rope": [[100.0, 50.0]]}


def test_bad_task_config_is_a_message(app):
    at = app.run()
    at.text_area(key="f_tasks").set_value("{name: k_back, k: 3, colour: red}").run()  # checked as it changes
    assert not at.exception
    assert len(at.error) == 1 and "colour" in at.error[0].value and "Cannot start the study" in at.error[0].value
    assert at.button(key="start").disabled
    at.text_area(key="f_tasks").set_value("{name: no_such_task}").run()
    assert "no_such_task" in at.error[0].value


def test_bad_checkpoint_is_a_message(app, tmp_path):
    step = tmp_path / "run" / "step_1"
    step.mkdir(parents=True)
    (step / "model.pt").write_bytes(b"not a torch file")
    (step / "config.yaml").write_text("model: {d_model: 16}\n")
    at = app.run()
    at.sidebar.radio(key="page").set_value("Try a checkpoint").run()
    at.text_input(key="try_path").set_value(str(step)).run()
    assert not at.exception
    assert "Cannot load the checkpoint" in at.error[0].value and "model.pt" in at.error[0].value
    at.text_input(key="try_path").set_value(str(tmp_path / "nothing")).run()
    assert "no such checkpoint" in at.error[0].value


def test_a_mix_pretrained_checkpoint_is_asked_its_tasks_as_text(app, tmp_path):
    from posbench.data.tasks import build_task
    from posbench.evaluation.loading import load_model
    from tests.evaluation.helpers import nano_checkpoint

    run = nano_checkpoint(tmp_path, "rope")  # trained on random tokens, but its config holds the default mix
    cfg = load_model(run / "latest").cfg
    at = app.run()
    at.sidebar.radio(key="page").set_value("Try a checkpoint").run()
    at.text_input(key="try_path").set_value(str(run)).run()
    at.radio(key="try_mode").set_value("Task example").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.selectbox(key="try_mix_task").options == [t.name for t in cfg.data.mix.tasks]
    at.selectbox(key="try_mix_task").set_value("sort").run()
    at.radio(key="try_split").set_value("ood").run()
    ex = build_task(next(t for t in cfg.data.mix.tasks if t.name == "sort")).example(0, 0, "ood")
    shown = "\n".join(m.value for m in at.markdown)
    # the prompt in the mix's text format (bytes tokenizer: one token per byte, plus <|bos|>)
    assert f"({len(ex.prompt.encode()) + 1} tokens)" in shown and ex.prompt in shown
    assert f"**Expected**: `{ex.answer}`" in shown
    symbols = sum(not c.isspace() for c in ex.answer)  # the spaces between the sorted digits are separators
    assert f"/ {symbols} answer tokens right ({len(ex.answer) - symbols} separators not counted)" in shown


def test_algorithmic_results_of_same_named_checkpoints_side_by_side(app, tmp_path):
    def cell(task, split, acc, beyond=None, na=None):
        return {"task": task, "split": split, "shots": 0, "accuracy": acc, "na": na, "chance_per_token": 0.5,
                "chance_whole_answer": 3e-6,
                "beyond_accuracy": beyond, "n_beyond": 4 if beyond is not None else 0}
    paths = []
    for sweep, cells in (("sweep_a", [cell("k_back", "id", 0.75), cell("k_back", "ood", 0.5, beyond=0.25)]),
                         ("sweep_b", [cell("k_back", "id", 0.5), cell("k_back", "ood", None, na="too long")])):
        out = tmp_path / sweep / "eval" / "nano_rope_s0"
        out.mkdir(parents=True)
        payload = {"label": "nano_rope_s0", "step": 9, "checkpoint": str(out),
                   "suites": {"algorithmic": {"cells": cells}}}
        (out / "results.json").write_text(json.dumps(payload))
        paths.append(str(out))
    at = explore(app, "\n".join(paths))
    rows = at.table[0].value.to_dict("records")
    other = "nano_rope_s0 (sweep_b/eval/nano_rope_s0)"  # the same label, told apart by its directory
    assert [(r["split"], r["nano_rope_s0"], r[other]) for r in rows] == [
        ("ID", "75.0", "50.0"), ("OOD, all positions", "50.0", "n/a (too long)")]
    assert rows[1]["nano_rope_s0 beyond train length"] == "25.0" and rows[1]["chance per answer token %"] == "50.0"
    assert rows[0]["chance (whole answer) %"] == "0.0003"  # whole answers beside exact match, not 50% per token


def test_a_checkpoint_without_attention_continues_and_says_so(app, tmp_path):
    from tests.evaluation.helpers import nano_checkpoint

    run = nano_checkpoint(tmp_path, "none", "model.arch.name=mamba", "model.arch.d_state=4", run_name="mamba")
    at = app.run()
    at.sidebar.radio(key="page").set_value("Try a checkpoint").run()
    at.text_input(key="try_path").set_value(str(run)).run()
    at.text_area(key="try_text").set_value("The cat").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("Greedy continuation" in m.value for m in at.markdown)
    assert any("**Prompt** (8 tokens)" in m.value for m in at.markdown)  # <|bos|> + 7 bytes, as task prompts start
    assert "`mamba` has no attention layers" in at.info[0].value


def test_a_study_directory_on_the_try_page_says_why_it_has_no_checkpoint(app, tmp_path):
    study = tmp_path / "study"
    (study / "cells").mkdir(parents=True)
    at = app.run()
    at.sidebar.radio(key="page").set_value("Try a checkpoint").run()
    at.text_input(key="try_path").set_value(str(study)).run()
    said = at.error[0].value
    assert "each cell's training run is deleted once it is scored" in said and "keep_checkpoints: true" in said
    (study / "checkpoints" / "k_back_rope_s0").mkdir(parents=True)
    at.text_input(key="try_path").set_value(str(study / "cells")).run()
    assert f"{study / 'checkpoints' / 'k_back_rope_s0'}" in at.error[0].value


def test_a_study_that_keeps_checkpoints_opens_on_the_try_page(app, tmp_path):
    """study.keep_checkpoints: each cell's run directory is kept in <study>/checkpoints/<cell> and loads."""
    from posbench.app.studyform import build_study
    from posbench.studies.cell import run_cell
    from posbench.studies.study_spec import expand
    from tests.app.helpers import TINY

    study = build_study({**TINY, "keep_checkpoints": True})
    cell = expand(study)[0]
    run_cell(cell, tmp_path / "s" / "work")
    kept = tmp_path / "s" / "checkpoints" / cell.cell_id
    assert (kept / "latest" / "model.pt").is_file() and not (tmp_path / "s" / "work" / cell.cell_id).exists()
    at = app.run()
    at.sidebar.radio(key="page").set_value("Try a checkpoint").run()
    at.text_input(key="try_path").set_value(str(kept)).run()
    assert not at.error and "trained at" in at.caption[0].value
