"""A sweep's arms: rows that are a PE with run settings of their own (a recipe), typed before anything trains."""

import pytest
import yaml

from posbench.errors import ConfigError
from posbench.sweeps.sweep_spec import load_sweep, plan_runs

RUN = {"model": {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64, "seq_len": 64},
       "train": {"budget_unit": "tokens", "target_budgets": [16384], "global_batch_tokens": 1024, "micro_batch": 16,
                 "device": "cpu"},
       "logging": {"wandb": "disabled"}}


def spec(tmp_path, **extra):
    body = {"name": "t", "sizes": ["nano"], "pes": [{"name": "rope"}], "seeds": [0, 1], "run": RUN}
    body.update(extra)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def test_an_arm_is_a_row_with_its_own_settings_and_the_others_keep_theirs(tmp_path):
    arms = [{"label": "rope_gated", "pe": {"name": "rope", "theta": 500.0},
             "run": {"model": {"attention_gate": "elementwise", "attention_window": [16, None]}}}]
    sweep = load_sweep(str(spec(tmp_path, arms=arms, claims=[{"order": "rope > rope_gated", "metric": "ppl_slope"}])))
    runs = {r.name: r for r in plan_runs(sweep, tmp_path / "out")}
    assert sorted(runs) == ["nano_rope_gated_s0", "nano_rope_gated_s1", "nano_rope_s0", "nano_rope_s1"]
    gated = runs["nano_rope_gated_s1"]
    assert gated.pe == "rope_gated" and gated.seed == 1
    assert gated.cfg.model.attention_gate == "elementwise" and gated.cfg.model.attention_window == [16, None]
    assert gated.cfg.pe.theta == 500.0 and gated.cfg.model.d_model == 32  # the sweep's run settings still apply
    plain = runs["nano_rope_s0"]
    assert plain.cfg.model.attention_gate == "none" and plain.cfg.model.attention_window is None
    assert plain.cfg.pe.theta == 10000.0


@pytest.mark.parametrize("arms, claims, message", [
    ([{"label": "rope", "pe": {"name": "rope"}}], [], "name one row twice"),
    ([{"label": "bad label", "pe": {"name": "rope"}}], [], "letters, digits"),
    ([{"label": "g", "pe": {"name": "rope"}}], [{"order": "rope > gg", "metric": "ppl_slope"}], "gg"),
])
def test_bad_arms_are_refused_when_the_sweep_loads(tmp_path, arms, claims, message):
    with pytest.raises(ConfigError, match=message):
        load_sweep(str(spec(tmp_path, arms=arms, claims=claims)))


def test_an_arm_setting_that_does_not_exist_stops_the_plan_naming_the_run(tmp_path):
    sweep = load_sweep(str(spec(tmp_path, arms=[{"label": "g", "pe": {"name": "rope"},
                                                 "run": {"model": {"attention_gat": "elementwise"}}}])))
    with pytest.raises(ConfigError, match="nano_g_s0.*attention_gate"):
        plan_runs(sweep, tmp_path / "out")
