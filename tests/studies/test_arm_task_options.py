"""A study arm's `task` options: the row runs the study's tasks with those options changed (an ablation of one
format element beside the full recipe), checked by the task's own strict loader before any cell trains."""

import pytest

from posbench.config_loader import load
from posbench.errors import ConfigError
from posbench.studies.study_spec import StudyConfig, expand

BASE = {"name": "ablation", "tasks": [{"name": "addition", "id_range": [1, 3], "ood_range": [4, 6],
                                       "reverse": "answer", "pad": True}],
        "pes": [{"name": "coupled", "inner": {"name": "learned"}, "offset": "fit"}], "seeds": [0, 1]}


def study(*arms):
    return load(StudyConfig, base={**BASE, "arms": list(arms)})


def test_an_arm_changes_only_the_options_it_names_and_only_on_its_own_cells():
    s = study({"label": "no_pad", "pe": BASE["pes"][0], "task": {"pad": False}},
              {"label": "rev_all", "pe": BASE["pes"][0], "task": {"reverse": "all"}})
    cells = {c.cell_id: c.task for c in expand(s)}
    assert sorted(cells) == ["addition_coupled_s0", "addition_coupled_s1", "addition_no_pad_s0",
                             "addition_no_pad_s1", "addition_rev_all_s0", "addition_rev_all_s1"]
    assert (cells["addition_coupled_s0"].pad, cells["addition_coupled_s0"].reverse) == (True, "answer")
    assert (cells["addition_no_pad_s1"].pad, cells["addition_no_pad_s1"].reverse) == (False, "answer")
    assert (cells["addition_rev_all_s0"].pad, cells["addition_rev_all_s0"].reverse) == (True, "all")
    assert cells["addition_no_pad_s0"].id_range == (1, 3)  # the rest of the task as the study wrote it
    assert s.tasks[0].pad is True  # the study's own task is not changed in place


def test_the_changed_task_renders_the_changed_format():
    from posbench.data.tasks import build_task
    cells = {c.cell_id: c.task for c in expand(study({"label": "no_pad", "pe": BASE["pes"][0],
                                                      "task": {"pad": False}}))}
    full, ablated = build_task(cells["addition_coupled_s0"]), build_task(cells["addition_no_pad_s0"])
    assert full.render(123, 45).prompt == "123+045=" and full.render(123, 45).answer == " 8610"
    assert ablated.render(123, 45).prompt == "123+45=" and ablated.render(123, 45).answer == " 861"


@pytest.mark.parametrize("options,message", [
    ({"padd": False}, "did you mean `pad`?"),
    ({"pad": 3}, "expected true/false"),
    ({"reverse": "sideways"}, "is not one of"),
    ({"name": "reverse"}, "cannot change the task's name"),
])
def test_bad_task_options_are_refused_when_the_study_loads(options, message):
    with pytest.raises(ConfigError, match=message) as e:
        study({"label": "bad", "pe": BASE["pes"][0], "task": options})
    assert "study.arms `bad`" in str(e.value)


def test_cell_specs_name_task_options_only_where_an_arm_has_them():
    """A finished cell is reused only when its spec matches: arms without task options keep the spec they had
    before the option existed (older study directories rerun without being refused), and an arm's options are
    in its spec (a changed ablation is never mistaken for the old one)."""
    import json

    from posbench.studies.cell_files import cell_spec
    cells = {c.cell_id: c for c in expand(study({"label": "plain", "pe": BASE["pes"][0]},
                                                {"label": "no_pad", "pe": BASE["pes"][0], "task": {"pad": False}}))}
    plain, no_pad = (json.loads(cell_spec(cells[k])) for k in ("addition_plain_s0", "addition_no_pad_s0"))
    assert "task" not in plain["arm"] and plain["task"]["pad"] is True
    assert no_pad["arm"]["task"] == {"pad": False} and no_pad["task"]["pad"] is False


def test_task_options_are_checked_only_on_the_tasks_the_arm_runs():
    """An arm restricted to `addition` may set `pad`, an option the study's other task does not have."""
    s = load(StudyConfig, base={**BASE, "tasks": BASE["tasks"] + [{"name": "k_back", "k": 2}],
                                "arms": [{"label": "no_pad", "pe": BASE["pes"][0], "tasks": ["addition"],
                                          "task": {"pad": False}}]})
    cells = {c.cell_id: c.task for c in expand(s)}
    assert cells["addition_no_pad_s0"].pad is False and "k_back_no_pad_s0" not in cells
    assert cells["k_back_coupled_s0"].name == "k_back"
