"""The Protocol section at the top of a study's report.md (studies/protocol.py), from the resolved settings."""

import torch

from posbench.data.tasks.task import build_task
from posbench.model.build import build_model
from posbench.studies.cell_config import cell_config
from posbench.studies.cell_result import parse_cell
from posbench.studies.study_report import write_outputs
from posbench.studies.study_spec import expand, load_study
from tests.app.helpers import cell

STUDY = ("name: p\ntasks: [{name: k_back, k: 2}]\npes: [{name: rope}, {name: learned}]\nseeds: [0, 1]\n"
         "train: {steps: 4, batch_size: 2, lr: 0.003}\n"
         "overrides: [model.d_model=16, model.n_heads=2, model.n_layers=1, model.d_ff=32, model.dropout=0.1]\n")


def test_study_report_starts_with_the_protocol(tmp_path):
    """Item 3: report.md states, before its tables, the ID/OOD lengths, the model (d_model, layers, heads,
    dropout), each PE's parameter count, the optimizer and schedule, the task settings (k), the code version and
    machine, and defines "OOD success"."""
    (tmp_path / "s.yaml").write_text(STUDY)
    study = load_study(str(tmp_path / "s.yaml"))
    results = [parse_cell(cell(pe, s, 0.5 + 0.1 * s, 0.4)) for pe in ("rope", "learned") for s in (0, 1)]
    write_outputs(tmp_path, results, study, [])
    report = (tmp_path / "report.md").read_text()
    protocol = report[report.index("## Protocol"):report.index("## Summary")]
    task = build_task(study.tasks[0])
    assert f"ID examples up to {task.max_tokens('id')}, OOD examples up to {task.max_tokens('ood')}" in protocol
    assert "d_model 16, 1 layers, 2 heads" in protocol and "dropout 0.1" in protocol
    for c in expand(study)[::2]:  # the reference count: the real model, built and counted on the CPU
        model = build_model(cell_config(c, task, tmp_path).model, cell_config(c, task, tmp_path).pe, "cpu")
        assert f"{c.label} {sum(p.numel() for p in model.parameters()):,}" in protocol
    assert "AdamW, peak lr 0.003" in protocol and "`k_back` id_range [8, 16], ood_range [17, 32], k 2," in protocol
    assert "commit " in protocol or "no git checkout" in protocol
    assert f"torch {torch.__version__}" in protocol and "CPU cores" in protocol
    assert "*OOD success (beyond, >= 90%)*: the share of seeds" in protocol
