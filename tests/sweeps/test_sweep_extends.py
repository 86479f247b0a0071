"""A sweep that `extends` another (merged over it) and a varied axis whose value a run has anyway (it adds nothing
to the run's name, so the baseline runs of a vary sweep are the runs of the sweep without it)."""

from pathlib import Path

import pytest
import yaml

from posbench.errors import ConfigError
from posbench.sweeps.sweep_spec import load_sweep, plan_runs

BASE = {"name": "base", "sizes": ["nano"], "pes": [{"name": "rope"}, {"name": "alibi"}], "seeds": [0, 1],
        "run": {"model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "seq_len": 64},
                "train": {"budget_unit": "tokens", "target_budgets": [16384], "global_batch_tokens": 1024,
                          "micro_batch": 16, "device": "cpu"}},
        "eval": {"suites": ["ppl"], "lengths": [64, 128]}}


def write(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec))
    return path


def test_extends_merges_over_the_parent(tmp_path):
    base = write(tmp_path / "base.yaml", BASE)
    child = write(tmp_path / "child.yaml", {"name": "child", "extends": str(base), "seeds": [3],
                                             "run": {"model": {"d_model": 48}}})
    s = load_sweep(str(child))
    assert s.name == "child" and s.seeds == [3]  # lists and scalars replace
    assert [p.name for p in s.pes] == ["rope", "alibi"]  # what the child does not state comes from the parent
    assert s.run["model"] == {"d_model": 48, "n_layers": 1, "n_heads": 2, "d_ff": 64, "seq_len": 64}  # merged
    assert (s.eval.suites, s.eval.lengths) == (BASE["eval"]["suites"], BASE["eval"]["lengths"])


def test_a_relative_extends_is_read_beside_the_extending_file(tmp_path, monkeypatch):
    """Not from the working directory: with another base.yaml there, the child used it silently."""
    (tmp_path / "sweeps").mkdir()
    write(tmp_path / "sweeps" / "base.yaml", BASE)
    child = write(tmp_path / "sweeps" / "child.yaml", {"name": "child", "extends": "base.yaml"})
    write(tmp_path / "base.yaml", {**BASE, "seeds": [7]})  # the decoy, where the command runs
    monkeypatch.chdir(tmp_path)
    assert load_sweep(str(child)).seeds == [0, 1]
    assert load_sweep("sweeps/child.yaml").seeds == [0, 1]


def test_extends_cycles_and_bad_values_are_refused(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    write(a, {**BASE, "name": "a", "extends": str(b)})
    write(b, {**BASE, "name": "b", "extends": str(a)})
    with pytest.raises(ConfigError, match="cycle"):
        load_sweep(str(a))
    write(a, {**BASE, "name": "a", "extends": 3})
    with pytest.raises(ConfigError, match="extends must be"):
        load_sweep(str(a))
    write(a, {**BASE, "name": "a", "extends": "no_such_sweep_preset"})
    with pytest.raises(ConfigError, match="no sweep preset `no_such_sweep_preset`"):
        load_sweep(str(a))


def test_a_varied_value_the_run_has_anyway_keeps_the_base_name(tmp_path):
    base = write(tmp_path / "base.yaml", BASE)
    child = write(tmp_path / "child.yaml", {
        "name": "child", "extends": str(base),
        "vary": {"model.packing": [{"mask": "causal", "positions": "window"},
                                   {"mask": "document", "positions": "document"}],
                 "model.d_model": [32, 40]}})
    plain = {r.name for r in plan_runs(load_sweep(str(base)), tmp_path / "out")}
    runs = plan_runs(load_sweep(str(child)), tmp_path / "out")
    names = [r.name for r in runs]
    assert len(names) == len(set(names)) == 16
    assert plain == {"nano_rope_s0", "nano_rope_s1", "nano_alibi_s0", "nano_alibi_s1"}
    assert plain <= set(names)  # the (causal, window, d_model 32) runs are the base sweep's own
    assert "nano_rope_packing-mask-document+positions-document_s1" in names
    assert "nano_alibi_d_model40_s0" in names
    assert "nano_alibi_d_model40_packing-mask-document+positions-document_s0" in names
    by_name = {r.name: r for r in runs}
    assert by_name["nano_rope_s0"].cfg.model.packing.mask == "causal"
    doc = by_name["nano_rope_packing-mask-document+positions-document_s0"].cfg.model.packing
    assert (doc.mask, doc.positions) == ("document", "document")
    # report rows name every axis, the base value included
    assert by_name["nano_rope_s0"].group == "nano 16.4K d_model=32 packing=mask-causal+positions-window"


def test_the_packing_preset_reuses_cpu_demo_runs():
    demo = {r.name: r.cfg for r in plan_runs(load_sweep("cpu_demo"), Path("/tmp/unused"))}
    packing = {r.name: r.cfg for r in plan_runs(load_sweep("cpu_demo_packing"), Path("/tmp/unused"))}
    assert set(demo) < set(packing) and len(packing) == 2 * len(demo)
    for name, cfg in demo.items():  # identical configs: a finished cpu_demo run is reused, not retrained
        assert packing[name] == cfg, name
