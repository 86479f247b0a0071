"""The Try page on a study checkpoint (study.keep_checkpoints): the checkpoint is a task model, asked its own
task in its own symbols, never the default pretraining mix or a BPE tokenizer it never had."""

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.helpers import MAIN, TINY


@pytest.fixture
def kept(tmp_path):
    from posbench.app.studyform import build_study
    from posbench.studies.cell import run_cell
    from posbench.studies.study_spec import expand

    study = build_study({**TINY, "tasks": "{name: k_back, k: 3}", "keep_checkpoints": True})
    cell = expand(study)[0]
    run_cell(cell, tmp_path / "s" / "work")
    return tmp_path / "s" / "checkpoints" / cell.cell_id


def test_try_page_asks_a_study_checkpoint_its_own_task(kept, tmp_path, monkeypatch):
    """Item 1: on a study checkpoint the task menu offers the cell's task with the cell's options (not
    the default mix), and a typed prompt reads the task's symbols (no `bpe` tokenizer error)."""
    monkeypatch.setenv("POSBENCH_APP_RUNS", str(tmp_path / "runs"))
    at = AppTest.from_file(MAIN, default_timeout=120).run()
    at.sidebar.radio(key="page").set_value("Try a checkpoint").run()
    at.text_input(key="try_path").set_value(str(kept)).run()
    at.radio(key="try_mode").set_value("Task example").run()
    assert not at.error, [e.value for e in at.error]
    assert at.selectbox(key="try_task").value == "k_back"
    assert at.text_input(key="try_fields").value == "{k: 3}"
    assert any("Greedy continuation" in m.value for m in at.markdown)
    at.radio(key="try_mode").set_value("Type a prompt").run()
    at.text_area(key="try_text").set_value("a b c").run()
    assert not at.error, [e.value for e in at.error]
    assert any(m.value.startswith("**Greedy continuation**") for m in at.markdown)
