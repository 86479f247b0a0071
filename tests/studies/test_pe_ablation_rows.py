"""Ablating one PE's options in a study: the same PE listed twice with other options, arms labelled with a dot,
and the app's form adding an arm."""

import pytest

from posbench.app.studyform import build_study
from posbench.config_loader import from_dict
from posbench.errors import ConfigError
from posbench.studies.study_spec import StudyConfig, expand
from tests.app.helpers import TINY

BASE = {"name": "a", "tasks": [{"name": "k_back", "k": 2}], "seeds": [0], "train": {"steps": 2, "batch_size": 2}}


def test_a_pe_listed_twice_with_other_options_gets_rows_named_by_them():
    """Item 7: `pes: [{name: rope}, {name: rope, theta: 500}]` is two rows, `rope` and `rope_theta500`
    (it failed: "two cells of the study have the same id"); listed twice alike it is refused, saying so."""
    study = from_dict(StudyConfig, {**BASE, "pes": [{"name": "rope"}, {"name": "rope", "theta": 500.0},
                                                    {"name": "alibi"}]}, "study")
    assert [c.label for c in expand(study)] == ["rope", "rope_theta500", "alibi"]
    assert [c.pe.theta for c in expand(study)[:2]] == [10000.0, 500.0]
    with pytest.raises(ConfigError, match="lists PE `alibi` twice with the same options"):
        from_dict(StudyConfig, {**BASE, "pes": [{"name": "alibi"}, {"name": "alibi"}]}, "study")


def test_an_arm_label_may_hold_a_dot():
    """Item 7: an arm labelled `alibi_x0.25` is accepted (it was refused); a label starting with a dot,
    or holding a slash, is still refused (it names files)."""
    arm = {"label": "rope_theta0.5k", "pe": {"name": "rope", "theta": 500.0}}
    study = from_dict(StudyConfig, {**BASE, "pes": [{"name": "rope"}], "arms": [arm]}, "study")
    assert [c.label for c in expand(study)] == ["rope", "rope_theta0.5k"]
    for bad in (".hidden", "a/b", ".."):
        with pytest.raises(ConfigError, match="label"):
            from_dict(StudyConfig, {**BASE, "pes": [{"name": "rope"}], "arms": [{**arm, "label": bad}]}, "study")


def test_the_app_form_adds_an_arm():
    """Item 7: the run page's form takes arms, one YAML mapping per line, into the study."""
    study = build_study({**TINY, "arms": "{label: rope_theta500, pe: {name: rope, theta: 500}}\n\n"})
    assert [r.label for r in study.rows()] == ["rope", "learned", "rope_theta500"]
    with pytest.raises(ConfigError, match="arms, line 1"):
        build_study({**TINY, "arms": "[not, a, mapping]"})
