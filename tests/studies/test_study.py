"""Study runner end to end, resume after a kill, statistics against hand-computed values."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posbench.errors import ConfigError
from posbench.stats import bootstrap_ci, paired, success_rate
from posbench.studies.study_runner import run_study
from posbench.studies.study_spec import expand, load_study

ROOT = Path(__file__).resolve().parents[2]

MINI = """
name: mini
tasks: [{name: k_back, k: 2}]
pes: [{name: rope}, {name: learned}]
seeds: [SEEDS]
overrides: [model.d_model=32, model.n_heads=2, model.n_layers=1, model.d_ff=64]
train: {steps: 12, batch_size: 8, curve_points: 2}
eval: {n_examples: 24, n_boot: 500}
workers: 1
reference: {k_back: {rope: {id: 1.0, ood: 1.0}}}
"""


def mini(tmp_path, seeds="0"):
    path = tmp_path / "mini.yaml"
    path.write_text(MINI.replace("SEEDS", seeds))
    return path


def test_two_cell_study_end_to_end(tmp_path):
    out = tmp_path / "out"
    result = run_study(load_study(str(mini(tmp_path))), out, progress=False)
    assert result["cells"] == 2 and result["ran"] == 2
    for name in ("report.md", "results.json", "results.csv", "learning_curves.png", "id_ood_bars.png",
                 "accuracy_vs_length.png", "attention_k_back.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    cells = json.loads((out / "results.json").read_text())["cells"]
    assert {c["pe"] for c in cells} == {"rope", "learned"}
    for c in cells:
        assert 0 <= c["id_acc"] <= 1 and 0 <= c["ood_acc"] <= 1 and [r["step"] for r in c["curve"]] == [6, 12]
        assert c["seq_len"] == 16 and c["ood_len"] == 32  # learned table covers OOD: a number, not n/a
    report = (out / "report.md").read_text()
    assert "| k_back | rope |" in report and "## Against the reference" in report
    # re-running skips every finished cell and rewrites identical outputs
    before = {n: (out / n).read_bytes() for n in ("report.md", "results.json", "id_ood_bars.png")}
    again = run_study(load_study(str(mini(tmp_path))), out, progress=False)
    assert again["ran"] == 0
    assert before == {n: (out / n).read_bytes() for n in before}


def test_a_rerun_with_other_settings_is_refused_not_reported_as_the_old_cells(tmp_path):
    """A finished cell is reused only for the same cell settings: other steps into the same --out are refused before
    any work (the old 12-step cells were reported as the new study's); more seeds reuse what exists; a report-only
    setting (n_boot) changes no cell."""
    out = tmp_path / "out"
    run_study(load_study(str(mini(tmp_path))), out, progress=False)
    before = {p.name: p.read_bytes() for p in (out / "cells").iterdir()}
    longer = tmp_path / "longer.yaml"
    longer.write_text(MINI.replace("SEEDS", "0").replace("steps: 12", "steps: 14"))
    with pytest.raises(ConfigError) as e:
        run_study(load_study(str(longer)), out, progress=False)
    assert "k_back_rope_s0 (train)" in str(e.value) and "k_back_learned_s0 (train)" in str(e.value)
    assert "Give another --out" in str(e.value)
    assert before == {p.name: p.read_bytes() for p in (out / "cells").iterdir()}  # nothing ran, nothing changed
    assert run_study(load_study(str(mini(tmp_path, seeds="0, 1"))), out, progress=False)["ran"] == 2
    report_only = tmp_path / "report_only.yaml"
    report_only.write_text(MINI.replace("SEEDS", "0, 1").replace("n_boot: 500", "n_boot: 800"))
    assert run_study(load_study(str(report_only)), out, progress=False)["ran"] == 0


def test_a_prope_cell_recorded_with_the_old_option_name_is_reused(tmp_path):
    """A spec written when p-RoPE's option was `fraction` describes the same cell as `kept_frequencies` now."""
    out = tmp_path / "out"
    spec = tmp_path / "prope.yaml"
    spec.write_text(MINI.replace("SEEDS", "0").replace("{name: learned}", "{name: prope, kept_frequencies: 0.5}"))
    run_study(load_study(str(spec)), out, progress=False)
    recorded = out / "specs" / "k_back_prope_s0.json"
    old = json.loads(recorded.read_text())
    old["pe"]["fraction"] = old["pe"].pop("kept_frequencies")
    recorded.write_text(json.dumps(old, sort_keys=True))
    assert run_study(load_study(str(spec)), out, progress=False)["ran"] == 0
    old["pe"]["fraction"] = 0.25  # another value is another cell
    recorded.write_text(json.dumps(old, sort_keys=True))
    with pytest.raises(ConfigError, match=r"k_back_prope_s0 \(pe\)"):
        run_study(load_study(str(spec)), out, progress=False)


def test_a_damaged_cell_file_is_run_again_not_read(tmp_path, capsys):
    """A truncated or foreign cell file (cells are written atomically, so only damage or a hand edit makes one) was a
    JSONDecodeError naming no file at report time; now it is said, by name, and the cell runs again."""
    out = tmp_path / "out"
    run_study(load_study(str(mini(tmp_path))), out, progress=False)
    cell = out / "cells" / "k_back_rope_s0.json"
    good = cell.read_bytes()
    cell.write_bytes(good[: len(good) // 2])
    assert run_study(load_study(str(mini(tmp_path))), out, progress=False)["ran"] == 1
    assert f"{cell}: not JSON" in capsys.readouterr().out
    assert cell.read_bytes() == good  # the cell is deterministic in its seed
    cell.write_text((out / "cells" / "k_back_learned_s0.json").read_text())
    assert run_study(load_study(str(mini(tmp_path))), out, progress=False)["ran"] == 1
    assert "holds cell 'k_back_learned_s0', not 'k_back_rope_s0'" in capsys.readouterr().out


def test_killed_study_completes_with_the_same_numbers(tmp_path):
    spec = mini(tmp_path, seeds="0, 1")
    ref_out, out = tmp_path / "ref", tmp_path / "killed"
    run_study(load_study(str(spec)), ref_out, progress=False)
    cmd = [sys.executable, str(ROOT / "scripts" / "study.py"), str(spec), "--out", str(out), "--no-progress"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list((out / "cells").glob("*.json")):
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    done = len(list((out / "cells").glob("*.json")))
    assert 1 <= done < 4, "the kill should land mid-way"
    result = run_study(load_study(str(spec)), out, progress=False)
    assert result["ran"] == 4 - done
    assert (out / "results.json").read_bytes() == (ref_out / "results.json").read_bytes()
    assert (out / "report.md").read_bytes() == (ref_out / "report.md").read_bytes()


def test_bootstrap_ci_by_hand():
    # [0, 0, 1]: a resample's mean is k/3, k ~ Binomial(3, 1/3): P(1) = 1/27 ~ 3.7% > 2.5%, and
    # P(mean <= 2/3) = 26/27 ~ 96.3%: the 95% CI is [0, 1] and the 90% CI is [0, 2/3]
    s95 = bootstrap_ci([0, 0, 1], 0.95, 20000)
    s90 = bootstrap_ci([0, 0, 1], 0.90, 20000)
    assert (s95.mean, s95.lo, s95.hi) == (pytest.approx(1 / 3), 0.0, 1.0)
    assert (s90.lo, s90.hi) == (0.0, pytest.approx(2 / 3))
    const = bootstrap_ci([0.7, 0.7, 0.7])
    assert (const.lo, const.hi) == (pytest.approx(0.7), pytest.approx(0.7))
    assert bootstrap_ci([None, None]).fmt() == "n/a"
    assert bootstrap_ci([0.5, 1.0], 0.95, 1000, seed=3) == bootstrap_ci([0.5, 1.0], 0.95, 1000, seed=3)


def test_success_rate_and_paired_comparison():
    assert success_rate([0.95, 0.5, 0.91, None], 0.9) == pytest.approx(2 / 3)
    same = paired({0: 0.5, 1: 0.9, 2: 0.1}, {0: 0.52, 1: 0.88, 2: 0.1}, "a", "b", 0.95, 2000)
    assert not same.distinguishable
    far = paired({0: 1.0, 1: 0.98, 2: 0.99}, {0: 0.5, 1: 0.52, 2: 0.49}, "a", "b", 0.95, 2000)
    assert far.distinguishable and far.diff.lo > 0.4


def test_grid_expansion_and_bad_studies(tmp_path):
    study = load_study("depth_x_steps")
    cells = expand(study)
    assert len(cells) == 3 * 3 * 3 * 5 * 3
    steps = {c.study.train.steps for c in cells}
    assert steps == {100, 300, 1000}
    assert any("model.n_layers=16" in c.overrides for c in cells)
    with pytest.raises(ConfigError, match="did you mean `quickstart`"):
        load_study("quickstar")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntasks: [{name: k_bak}]\npes: [{name: rope}]\n")
    with pytest.raises(ConfigError, match="k_back"):
        load_study(str(bad))
    assert len(expand(load_study("quickstart"))) == 100
