"""A study under model.matmul=auto measures the library once, records it in <out>/matmul.json, trains its cells on
it (each cell's result names the library that ran), and a re-run of a cell into the same --out uses the record
even where the probe would now choose the other library (studies/study_matmul.py)."""

import json

import pytest
import torch

from posbench.model import matmul_choice
from posbench.studies.study_matmul import MATMUL_FILE
from posbench.studies.study_runner import run_study
from posbench.studies.study_spec import load_study

STUDY = """
name: matmul_auto
tasks: [{name: k_back, k: 2}]
pes: [{name: rope}]
seeds: [0, 1]
overrides: [model.d_model=16, model.n_heads=2, model.n_layers=1, model.d_ff=32, model.matmul=auto]
train: {steps: 4, batch_size: 8, curve_points: 1}
eval: {n_examples: 8, n_boot: 200}
workers: 1
"""


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
def test_a_study_records_its_library_and_a_rerun_cell_uses_it(tmp_path, monkeypatch):
    spec = tmp_path / "study.yaml"
    spec.write_text(STUDY)
    out = tmp_path / "out"
    monkeypatch.setattr(matmul_choice, "probe_rates", lambda shapes, rows, threads: {"torch": 1.0, "onednn": 2.0})
    run_study(load_study(str(spec)), out, progress=False)
    assert json.loads((out / MATMUL_FILE).read_text())["matmul"] == "onednn"
    cells = sorted((out / "cells").glob("*.json"))
    assert len(cells) == 2 and all(json.loads(p.read_text())["matmul"] == "onednn" for p in cells)

    def no_probe(*_):
        raise AssertionError("probed although the study recorded its library")

    monkeypatch.setattr(matmul_choice, "probe_rates", no_probe)  # were it asked now, it could say anything
    cells[1].unlink()  # an unfinished cell: the re-run trains it again
    result = run_study(load_study(str(spec)), out, progress=False)
    assert result["ran"] == 1 and json.loads(cells[1].read_text())["matmul"] == "onednn"
    assert "Linear layers (model.matmul) on onednn (2 cells)." in (out / "report.md").read_text()
