"""A sweep's `eval:` block is eval.py's EvalConfig, typed when the spec loads: a misspelt key stops the command with
the strict loader's one line (the bad key and the nearest valid one) before anything is planned, trained or written,
and every preset evaluates with exactly the settings the old late loading built from its raw YAML."""

from pathlib import Path

import pytest
import yaml

from posbench.cli.sweep import main
from posbench.config import preset_path
from posbench.config_loader import deep_merge, load, to_dict
from posbench.errors import ConfigError
from posbench.evaluation.eval_config import EvalConfig
from posbench.sweeps.sweep_spec import load_sweep

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted(p.stem for p in (ROOT / "configs" / "sweep").glob("*.yaml"))
SPEC = {"name": "t", "sizes": ["nano"], "pes": [{"name": "rope"}, {"name": "alibi"}], "seeds": [0],
        "run": {"model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "seq_len": 64},
                "train": {"stream": "random", "budget_unit": "tokens", "target_budgets": [4096, 8192],
                          "global_batch_tokens": 512, "micro_batch": 8, "device": "cpu"}},
        "eval": {"suites": ["ppl"], "lengths": [64, 128], "ppl": {"protocols": ["nonoverlap"], "max_tokens": 512}}}


def raw_eval(preset: str) -> dict:
    """A preset's `eval:` mapping as the old loader held it: its parents' (`extends`) merged under its own."""
    layer = yaml.safe_load(preset_path("sweep", preset).read_text())
    return deep_merge(raw_eval(layer["extends"]) if layer.get("extends") else {}, layer.get("eval") or {})


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_evaluates_with_the_eval_config_the_old_code_built(preset):
    old = load(EvalConfig, overrides=[{"progress": False}, raw_eval(preset)], where="sweep.eval")  # the old recipe
    new = load_sweep(preset).eval
    assert isinstance(new, EvalConfig) and to_dict(new) == to_dict(old)
    assert new.progress is False  # the sweep draws its own bar over the evaluations


def write(tmp_path: Path, spec: dict) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("block, key, near", [
    ({"suites": ["ppl"], "lenghts": [64]}, "sweep.eval.lenghts", "lengths"),
    ({"suites": ["ppl"], "ppl": {"max_tokns": 512}}, "sweep.eval.ppl.max_tokns", "max_tokens"),
])
@pytest.mark.parametrize("flags", [["--estimate"], []])
def test_a_typo_in_eval_stops_the_sweep_command_with_one_line_before_any_work(tmp_path, capsys, block, key, near,
                                                                            flags):
    """Before, the spec loaded and the block was read only after the runs were planned (gpu_check's pre-flight
    `load_sweep` let it through to the lent GPU); now the loader refuses it, with or without a run to follow."""
    out = tmp_path / "out"
    spec = write(tmp_path, {**SPEC, "eval": block})
    with pytest.raises(ConfigError, match=f"unknown config key `{key}`"):  # the spec alone is refused
        load_sweep(str(spec))
    assert main([str(spec), "--out", str(out), "--no-progress", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: unknown config key `{key}` for ") and err.endswith(f" (did you mean `{near}`?)\n")
    assert err.count("\n") == 1
    assert not out.exists()


def test_estimate_plans_every_run_prints_the_estimate_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(write(tmp_path, SPEC)), "--out", str(out), "--estimate"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("estimate: 4 runs: ") and printed.count("\n") == 1  # 2 PEs, each with its 4K branch
    assert not out.exists()


def test_the_reports_protocol_says_what_the_eval_block_changes_from_the_defaults(tmp_path):
    from posbench.studies.protocol import sweep_items
    from posbench.sweeps.sweep_spec import plan_runs

    # `device: auto` and `n_samples: 8` are the defaults: the typed settings cannot tell them from unwritten keys
    block = {"suites": ["ppl", "passkey"], "device": "auto", "ppl": {"max_tokens": 512},
             "passkey": {"depths": [0.5], "n_samples": 8}}
    sweep = load_sweep(str(write(tmp_path, {**SPEC, "eval": block})))
    items = dict(sweep_items(sweep, plan_runs(sweep, tmp_path / "out")))
    assert items["Evaluation"] == ("eval.py's defaults except suites ['ppl', 'passkey'], ppl {'max_tokens': 512}, "
                                   "passkey {'depths': [0.5]}")
    sweep = load_sweep(str(write(tmp_path, {**SPEC, "eval": {"suites": ["all"]}})))
    assert dict(sweep_items(sweep, plan_runs(sweep, tmp_path / "out")))["Evaluation"] == "eval.py's defaults"
