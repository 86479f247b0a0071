"""Where a study's cells train: `--device` (cuda refused before any work where none is visible; the device enters
the cells' specs, so cells trained on one device are never reported as another's), `--report-only` (the report
from finished cells, e.g. trained on a GPU machine and copied here; unfinished cells named, nothing trained), the
device each result records and the report's line counting them, and scoring on the model's device (CUDA only)."""

import json

import pytest
import torch

from posbench.cli.study import main as study_main
from posbench.evaluation.task_accuracy import model_device, score_rows
from posbench.studies.cell_result import parse_cell
from posbench.studies.study_report import devices_line
from tests.evaluation.helpers import small_model
from tests.studies.test_study import mini


def test_cuda_without_a_gpu_is_refused_before_any_work(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    out = tmp_path / "out"
    assert study_main([str(mini(tmp_path)), "--device", "cuda", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--device cuda but no CUDA device is visible" in err and "leave --device out" in err
    assert not out.exists()


def test_report_only_reports_finished_cells_and_names_the_missing_ones(tmp_path, capsys):
    spec, out = str(mini(tmp_path)), str(tmp_path / "out")
    assert study_main([spec, "--out", out, "--no-progress"]) == 0
    cells = json.loads((tmp_path / "out" / "results.json").read_text())["cells"]
    assert {c["device"] for c in cells} == {"cpu"}
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Trained on cpu (2 cells)." in report
    (tmp_path / "out" / "report.md").unlink()
    capsys.readouterr()

    # a second seed was never trained: named, and nothing is trained or written
    assert study_main([spec, "--out", out, "--no-progress", "--report-only", "--seeds", "0", "1"]) == 2
    err = capsys.readouterr().err
    assert "--report-only: 2 of 4 cells are not finished" in err and "k_back_rope_s1" in err
    assert not (tmp_path / "out" / "cells" / "k_back_rope_s1.json").exists()
    assert not (tmp_path / "out" / "report.md").exists()

    # the same cells as if trained on cuda: other settings, refused (on any machine: nothing is trained)
    assert study_main([spec, "--out", out, "--no-progress", "--report-only", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "holds finished cells made with other settin" in err  # (the one-line error elides the middle)

    assert study_main([spec, "--out", out, "--no-progress", "--report-only"]) == 0
    assert "2 cells (0 run now)" in capsys.readouterr().out
    assert (tmp_path / "out" / "report.md").read_text() == report


def test_devices_line_counts_cells_per_device():
    def cell(**device):  # the old keyless format; without `device`: written before cells recorded it
        return parse_cell({"cell_id": "t_rope_s0", "task": "t", "pe": "rope", "seed": 0, "axes": {}, **device})

    results = [cell(device="cuda: NVIDIA H100 80GB HBM3")] * 2 + [cell(device="cpu"), cell()]
    assert devices_line(results) == " Trained on cpu (2 cells), cuda: NVIDIA H100 80GB HBM3 (2 cells)."


def test_model_device_of_a_stand_in_without_weights_is_the_cpu():
    class StandIn:
        def parameters(self):
            return iter(())

    assert model_device(StandIn()) == torch.device("cpu")
    assert model_device(object()) == torch.device("cpu")
    assert model_device(torch.nn.Linear(2, 2)) == torch.device("cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_rows_built_on_the_cpu_are_scored_where_the_model_is():
    """The same model and CPU rows scored on the CPU and on CUDA: the same per-example accuracy and position counts
    (a tiny float32 model whose logits differ by rounding only; random weights leave no near-ties at these sizes)."""
    model, _ = small_model("rope", seq_len=16)
    torch.manual_seed(1)
    x = torch.randint(0, 256, (10, 24))
    y = torch.where(torch.rand(10, 24) < 0.5, torch.randint(0, 256, (10, 24)), torch.full((10, 24), -100))
    on_cpu = score_rows(model, x, y, train_len=16)
    on_gpu = score_rows(model.cuda(), x, y, train_len=16)
    assert on_gpu.per_example == on_cpu.per_example and on_gpu.per_position == on_cpu.per_position
    assert on_gpu.loss == pytest.approx(on_cpu.loss, rel=1e-4)
