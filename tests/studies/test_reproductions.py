"""The reproduction presets run in reduced form: their own tasks, PEs and claims, a tiny model, few steps,
two seeds (so every relation gets an interval); the report ends in a verdict per claim. Numbers meaningless."""

import sys
from pathlib import Path

import pytest

from posbench.studies.study_runner import run_study
from posbench.studies.study_spec import load_study
from tests.conftest import write_word_corpus

ROOT = Path(__file__).resolve().parents[2]
TINY = ["model.d_model=32", "model.n_heads=2", "model.n_layers=1", "model.d_ff=64", "model.dropout=0.0"]


@pytest.mark.slow
def test_kazemnejad_preset_reduced(tmp_path):
    study = load_study("kazemnejad")
    assert [t.name for t in study.tasks] == ["simple_copy", "reverse", "no_carry_add"] and len(study.seeds) == 5
    study.seeds, study.overrides, study.workers = [0, 1], TINY, 1
    study.train.steps, study.train.curve_points = 6, 1
    study.eval.n_examples, study.eval.n_boot = 8, 200
    run_study(study, tmp_path, progress=False)
    report = (tmp_path / "report.md").read_text()
    assert "## Published claims, reproduced or not" in report
    assert "### `none >= t5 > alibi > rope ~ learned` on ood_beyond_acc (Kazemnejad et al. 2023" in report
    verdicts = [line for line in report.splitlines() if line.startswith("**Verdict (")]
    assert [v.split(")")[0] for v in verdicts] == ["**Verdict (simple_copy", "**Verdict (reverse",
                                                   "**Verdict (no_carry_add"]
    assert all(": reproduced**" in v or ": not reproduced: " in v or ": inconclusive: " in v for v in verdicts)
    assert "| none >= t5 |" in report and "| rope ~ learned |" in report


@pytest.mark.slow
def test_alibi_ppl_preset_reduced(tmp_path):
    """The sweep preset with its PEs and claims on generated text: 2 seeds x 3 PEs, a tiny model."""
    import subprocess

    import yaml

    from posbench.config import preset_path
    from posbench.yaml_io import load_yaml

    spec = load_yaml(preset_path("sweep", "alibi_ppl"))
    assert [p["name"] for p in spec["pes"]] == ["alibi", "sinusoidal", "rope"] and len(spec["seeds"]) == 5
    corpus = write_word_corpus(tmp_path / "corpus", n_files=4, docs_per_file=120, words=(30, 90))
    spec["seeds"] = [0, 1]
    spec["run"]["model"] = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "seq_len": 64}
    spec["run"]["data"]["source"]["paths"] = [f"{corpus}/*.jsonl"]
    spec["run"]["data"]["root"] = str(tmp_path / "data")
    spec["run"]["schedule"] = {"warmup_tokens": 512}
    spec["run"]["train"].update(target_budgets=[8192], global_batch_tokens=512, micro_batch=8, ckpt_interval=0)
    spec["eval"].update(lengths=[32, 64, 128, 256], ppl={"protocols": ["nonoverlap"], "max_tokens": 1024})
    spec["n_boot"] = 200
    path = tmp_path / "alibi_ppl.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "sweep.py"), str(path), "--out",
                           str(tmp_path / "out"), "--prepare-data", "--workers", "1", "--no-progress"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Perplexity slope past the training length" in report
    assert "| nano 8.19K | alibi |" in report
    for order in ("sinusoidal > alibi", "rope > alibi", "0 >= alibi"):
        assert f"### `{order}` on ppl_slope (Press et al. 2022" in report
    verdicts = [line for line in report.splitlines() if line.startswith("**Verdict (nano 8.19K)")]
    assert len(verdicts) == 3 and all(any(k in v for k in (": reproduced**", ": not reproduced: ", ": inconclusive: "))
                                  for v in verdicts)
