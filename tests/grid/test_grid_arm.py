"""One arm grammar for studies and sweeps (grid/arm.py): every preset expands as it did before, the older dotted
spelling is converted (said on stderr), a sweep refuses a study's row settings, and a finished cell recorded with
the older spelling is still recognised as the same cell."""

import json

import pytest

from posbench.config import RunConfig
from posbench.config_loader import load, to_dict
from posbench.errors import ConfigError
from posbench.grid.arm import Arm, migrate_spec, spec_form
from posbench.studies.study_spec import StudyConfig, expand
from posbench.sweeps.sweep_spec import SweepConfig
from tests.grid.preset_digest import ROOT, presets, study_digest, sweep_digest

BEFORE = json.loads((ROOT / "tests" / "grid" / "grid_presets.json").read_text())


# `reference` plans the paper-sized runs (seconds of parameter arithmetic) and has no arms: slow, so CI skips it
GRID = [f"study/{n}" for n in presets("study")] + [
    pytest.param(f"sweep/{n}", marks=pytest.mark.slow) if n == "reference" else f"sweep/{n}" for n in presets("sweep")]


@pytest.mark.parametrize("name", GRID)
def test_every_preset_expands_to_the_cells_runs_and_settings_it_did_before(name):
    kind, preset = name.split("/")
    assert (study_digest if kind == "study" else sweep_digest)(preset) == BEFORE[name]


def test_the_dotted_spelling_is_converted_to_run_with_a_note_and_loads_the_same_config(capsys):
    text = Arm(label="gpt_oss", overrides=["model.qk_norm=false", "model.attention_window=[8, null]",
                                           "model.attention_temperature={name: ssmax}"])
    note = capsys.readouterr().err
    assert note.count("\n") == 1 and "`overrides:` is read as `run:" in note and "gpt_oss" in note
    mapping = Arm(label="gpt_oss", run={"model": {"qk_norm": False, "attention_window": [8, None],
                                                  "attention_temperature": {"name": "ssmax"}}})
    assert capsys.readouterr().err == ""  # the canonical form says nothing
    assert text == mapping and text.overrides == []
    assert to_dict(load(RunConfig, overrides=["model.qk_norm=false", "model.attention_window=[8, null]",
                                              "model.attention_temperature={name: ssmax}"])) == \
        to_dict(load(RunConfig, overrides=[mapping.run]))


@pytest.mark.parametrize("arm, message", [
    ({"label": "x", "run": {"model": {"n_layers": 2}}, "overrides": ["model.n_layers=4"]}, "not both"),
    ({"label": ".hidden"}, "starting with a letter or digit"),
    ({"label": "a/b"}, "letters, digits"),
])
def test_an_arm_is_refused_before_anything_runs(arm, message):
    with pytest.raises(ConfigError, match=message):
        load(StudyConfig, overrides=[{"tasks": [{"name": "k_back"}], "arms": [arm]}])


@pytest.mark.parametrize("extra", [{"tasks": ["k_back"]}, {"task": {"k": 2}}, {"arch": {"name": "mamba"}}])
def test_a_sweep_row_refuses_a_studys_row_settings(extra):
    with pytest.raises(ConfigError, match="a study's row settings"):
        load(SweepConfig, overrides=[{"arms": [{"label": "r", "pe": {"name": "rope"}, **extra}]}])


def test_a_label_with_a_dash_and_a_dot_names_a_sweep_row_as_it_names_a_study_row():
    sweep = load(SweepConfig, overrides=[{"arms": [{"label": "rope-x0.5", "pe": {"name": "rope"}}]}])
    assert sweep.row_names == ["rope-x0.5"]


def test_a_cell_spec_recorded_with_dotted_arm_text_migrates_to_the_spec_written_now():
    study = load(StudyConfig, overrides=[{"tasks": [{"name": "k_back"}], "arms": [
        {"label": "deep", "pe": {"name": "rope"}, "run": {"model": {"n_layers": 4}}},
        {"label": "plain", "pe": {"name": "alibi"}}]}])
    deep, plain = (spec_form(c.arm) for c in expand(study)[::len(study.seeds)])
    # the arm as the spec recorded it while `overrides` was the study's spelling (to_dict of the old StudyArm): a
    # row without settings of its own is recorded exactly as it was (so every such cell's spec is unchanged)
    assert plain == {"label": "plain", "pe": to_dict(study.arms[1].pe), "arch": {"name": "decoder"},
                     "overrides": [], "tasks": []}
    old_deep = {"arm": {**{k: v for k, v in deep.items() if k != "run"}, "overrides": ["model.n_layers=4"]}}
    assert migrate_spec(old_deep) == {"arm": deep} and migrate_spec({"arm": dict(plain)}) == {"arm": plain}
