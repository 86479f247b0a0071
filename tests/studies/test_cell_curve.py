"""A cell's learning curve from in-memory snapshots (train(snapshots=...)) against the checkpoint files it
used to be scored from, the snapshot hook's isolation from training, and bench_study's table pieces."""

import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from posbench.data.tasks.source import TaskSource, eval_batch
from posbench.data.tasks.task import build_task
from posbench.evaluation.loading import load_model
from posbench.evaluation.task_accuracy import score_rows
from posbench.studies.cell import CpuPhases, run_cell
from posbench.studies.cell_config import cell_config
from posbench.studies.cell_result import CurvePoint
from posbench.studies.row_cache import CachedRows
from posbench.studies.study_spec import expand, load_study
from posbench.training import checkpoint as ckpt
from posbench.training.loop import train

ROOT = Path(__file__).resolve().parents[2]

TINY = """
name: tiny
tasks: [{name: k_back, k: 2}]
pes: [{name: PE}]
seeds: [3]
overrides: [model.d_model=32, model.n_heads=2, model.n_layers=1, model.d_ff=64, model.dropout=0.1]
train: {steps: 12, batch_size: 8, curve_points: 3}
eval: {n_examples: 24}
workers: 1
"""


def tiny_cell(tmp_path, pe):
    path = tmp_path / f"tiny_{pe}.yaml"
    path.write_text(TINY.replace("PE", pe))
    (cell,) = expand(load_study(str(path)))
    return cell


def setup(cell, work_dir):
    task = build_task(cell.task)
    cfg = cell_config(cell, task, work_dir)
    st = cell.study.train
    source = CachedRows(TaskSource(task, cfg.model.seq_len, cell.seed, n_val=64), st.steps * st.batch_size,
                        work_dir / "rows")
    return task, cfg, source


@pytest.mark.parametrize("pe", ["rope", "learned", "alibi"])
def test_in_memory_curve_equals_the_checkpoint_curve(tmp_path, pe):
    cell = tiny_cell(tmp_path, pe)
    torch.set_num_threads(1)  # as run_cell does
    # the way a cell scored its curve before: every checkpoint written, loaded back, scored
    task, cfg, source = setup(cell, tmp_path / "files")
    run_dir = Path(train(cfg, source)["run_dir"])
    ev = cell.study.eval
    splits = {s: eval_batch(task, ev.seed, s, range(ev.n_examples)) for s in ("id", "ood")}
    curve, model = [], None
    for path in ckpt.list_checkpoints(run_dir):
        model = load_model(path).model
        row = {"step": json.loads((path / "meta.json").read_text())["step"]}
        for split, (_, x, y) in splits.items():
            row[f"{split}_acc"] = score_rows(model, x, y).acc
        row["ood_beyond_acc"] = score_rows(model, *splits["ood"][1:], train_len=cfg.model.seq_len).beyond
        curve.append(row)
    final = {split: score_rows(model, x, y, train_len=cfg.model.seq_len) for split, (_, x, y) in splits.items()}
    losses = [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]

    result = run_cell(cell, tmp_path / "memory")
    assert [r["step"] for r in curve] == [4, 8, 12]
    assert result.curve == [CurvePoint(**row) for row in curve]  # exactly: the same weights, scored the same way
    for split, score in final.items():
        assert (result.metric(f"{split}_acc"), result.metric(f"{split}_exact"), result.metric(f"{split}_loss")) == \
            (score.acc, score.exact, score.loss)
    assert result.ood_beyond_acc == final["ood"].beyond
    # the learning curve records the headline metric too: its last point is the final beyond-length score
    assert result.curve[-1].ood_beyond_acc == result.ood_beyond_acc is not None
    assert [r["loss"] for r in result.train_loss] == losses
    assert not list((tmp_path / "memory").glob(f"{cell.cell_id}/step_*"))  # no run dir left behind


def test_snapshots_cannot_change_training(tmp_path):
    """A snapshot that draws from every RNG and leaves the model in train mode still leaves training as
    it was: with dropout on, a single stray draw between steps would change every later step."""
    cell = tiny_cell(tmp_path, "rope")
    _, cfg, source = setup(cell, tmp_path / "plain")
    plain = Path(train(cfg, source)["run_dir"])
    _, cfg2, source2 = setup(cell, tmp_path / "snap")
    seen = []

    def greedy(step, model):
        assert not model.training and not torch.is_grad_enabled()
        torch.rand(1000), random.random(), np.random.rand(10)
        model.train()
        model(source2.samples([0, 1])[0])  # dropout draws too
        seen.append(step)

    snap = Path(train(cfg2, source2, snapshots=greedy)["run_dir"])
    assert seen == [4, 8, 12]
    assert [p.name for p in ckpt.list_checkpoints(snap)] == ["step_00000012"]  # periodic ones stay in memory
    a = torch.load(plain / "step_00000012" / "model.pt", weights_only=True)
    b = torch.load(snap / "step_00000012" / "model.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rows = [json.loads(line) for line in (plain / "metrics.jsonl").read_text().splitlines()]
    rows2 = [json.loads(line) for line in (snap / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("loss") for r in rows] == [r.get("loss") for r in rows2]


def test_cpu_phases_book_laps():
    phases = CpuPhases(since=0.0)
    phases.lap("startup")
    phases.lap("train")
    phases.lap("train")
    assert set(phases.seconds) == {"startup", "train"} and phases.seconds["startup"] > 0


def _bench():
    spec = importlib.util.spec_from_file_location("bench_study", ROOT / "scripts" / "bench_study.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_phase_totals_and_table():
    bench = _bench()
    records = [{"pid": 11, "seconds": {"startup": 2.0, "rows": 1.0, "train": 10.0, "eval": 1.0, "other": 0.5}},
               {"pid": 12, "seconds": {"startup": 2.0, "train": 10.0, "eval": 1.0, "other": 0.5}}]
    totals = bench.phase_totals(records, parent_pid=1, parent_cpu=5.0, children_cpu=30.0, report_cpu=3.0)
    # workers: 30 s, 28 s of them in cells; parent: 5 s, 3 s of them the report
    assert totals == {"startup": 4.0, "rows": 1.0, "train": 20.0, "eval": 2.0, "report": 3.0, "other": 5.0}
    # workers=1: cells run in the parent; its other time is what the cells and the report leave
    inline = bench.phase_totals(records[:1], parent_pid=11, parent_cpu=20.0, children_cpu=0.0, report_cpu=3.0)
    assert inline["other"] == pytest.approx(0.5 + 20.0 - 14.5 - 3.0)
    table = bench.format_table(totals, wall=20.0, n_cells=2, workers=2, flops=4e12, tokens=1000,
                               peaks={"a": 50e9, "b": 100e9})
    lines = table.splitlines()
    assert [line.split()[0] for line in lines[1:8]] == [*bench.PHASES, "total"]
    assert lines[3].split()[1:3] == ["20.0", "57.1%"]  # train: 20 of 35 CPU-s
    # floor: 4 TFLOP on 2 workers at the better peak (100 GFLOP/s) = 20 s wall, 40 CPU-s = 2x the train phase
    assert "= 20.0 s wall (40.0 CPU-s)" in table and "train phase at 200% of peak" in table
