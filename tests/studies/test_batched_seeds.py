"""Seeds trained as one batched model (studies/batched_train.py) against the same seeds trained alone by the
project's trainer (`training.loop.train`, the reference): per-step losses and weights after 50 steps, with
dropout and active gradient clipping; reruns bit-identical; settings and models that cannot batch fall
back to separate runs and say why."""

import json
from pathlib import Path

import pytest
import torch

from posbench.config import RunConfig
from posbench.config_loader import load
from posbench.studies.batched_train import BatchedGroup, train_group, why_not_batched
from posbench.studies.cell import run_cell, run_group
from posbench.studies.seed_groups import seed_groups
from posbench.studies.study_runner import run_study
from posbench.studies.study_spec import expand, load_study
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train

STEPS, BATCH, T, V = 50, 8, 16, 11
RTOL = 1e-5  # fp32: the batched matmuls and per-member norms round differently from the lone ones (~5e-7 seen)
CLIP = 0.3  # below the gradient norms of these runs (checked), so every member's own clip coefficient matters


def run_cfg(pe: str, seed: int, out: Path, **model) -> RunConfig:
    return load(RunConfig, overrides=[{
        "model": {"size": "tiny", "d_model": 32, "n_heads": 2, "n_layers": 2, "d_ff": 64, "vocab_size": V,
                  "seq_len": T, "dropout": 0.1, **model},
        "pe": {"name": pe}, "seed": seed,
        "train": {"out_dir": str(out), "run_name": f"{pe}_s{seed}", "budget_unit": "tokens",
                  "target_budgets": [STEPS * BATCH * T], "global_batch_tokens": BATCH * T, "micro_batch": BATCH,
                  "log_interval": 1, "eval_interval": 0, "ckpt_interval": 25, "device": "cpu", "grad_clip": CLIP},
        "logging": {"wandb": "disabled"}}]).resolve()


def weights(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def lone_runs(pe: str, seeds, out: Path):
    """Each seed through the trainer: its logged rows and its weights at each snapshot step."""
    runs = []
    for s in seeds:
        snaps = {}
        result = train(run_cfg(pe, s, out), RandomTokens(V, T, s),
                       snapshots=lambda step, m, snaps=snaps: snaps.__setitem__(step, weights(m)))
        rows = [json.loads(line) for line in (Path(result["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
        runs.append(([r for r in rows if "loss" in r], snaps))
    return runs


def batched_run(pe: str, seeds, out: Path, group=None):
    snaps = [{} for _ in seeds]
    rows = train_group([run_cfg(pe, s, out) for s in seeds], [RandomTokens(V, T, s) for s in seeds],
                       lambda m, step, model: snaps[m].__setitem__(step, weights(model)), group=group)
    return rows, snaps


def max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a study worker
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("pe", ["rope", "alibi", "learned", "none"])
def test_a_batched_group_of_three_equals_three_lone_runs(tmp_path, pe):
    seeds = [0, 1, 2]
    lone = lone_runs(pe, seeds, tmp_path / "lone")
    rows, snaps = batched_run(pe, seeds, tmp_path / "batched")
    for m, (lone_rows, lone_snaps) in enumerate(lone):
        assert any(r["grad_norm"] > CLIP for r in lone_rows), "clipping never acted: the test would not see it"
        assert [r["step"] for r in rows[m]] == [r["step"] for r in lone_rows] == list(range(1, STEPS + 1))
        for got, want in zip(rows[m], lone_rows):
            assert got["loss"] == pytest.approx(want["loss"], rel=RTOL), (pe, m, got["step"])
        assert sorted(snaps[m]) == sorted(lone_snaps) == [25, 50]
        for step, want in lone_snaps.items():
            for name, w in want.items():
                assert max_rel(snaps[m][step][name], w) < RTOL, (pe, m, step, name)


def test_each_member_draws_its_own_dropout_stream(tmp_path):
    """The control that shows the comparison above can fail: members given each other's dropout generators
    leave their lone trajectories at once, although init and data are still their own."""
    seeds = [0, 1]
    lone = lone_runs("rope", seeds, tmp_path / "lone")
    group = BatchedGroup([run_cfg("rope", s, tmp_path / "b") for s in seeds], [RandomTokens(V, T, s) for s in seeds])
    group.probe()
    group.generators.reverse()
    rows, _ = batched_run("rope", seeds, tmp_path / "b", group=group)
    assert rows[0][0]["loss"] != pytest.approx(lone[0][0][0]["loss"], rel=1e-3)


def test_reruns_are_bit_identical(tmp_path):
    first_rows, first = batched_run("alibi", [0, 1, 2], tmp_path / "a")
    again_rows, again = batched_run("alibi", [0, 1, 2], tmp_path / "b")
    assert first_rows == again_rows
    for a, b in zip(first, again):
        assert all(torch.equal(a[50][k], b[50][k]) for k in a[50])


def test_settings_that_cannot_batch_are_named(tmp_path):
    assert why_not_batched(run_cfg("rope", 0, tmp_path)) is None
    assert "model.attn_dropout" in why_not_batched(run_cfg("rope", 0, tmp_path, attn_dropout=0.1))
    compiled = run_cfg("rope", 0, tmp_path)
    compiled.train.compile = True
    assert "train.compile" in why_not_batched(compiled)


STUDY = """
name: tiny
tasks: [{name: k_back, k: 2}]
pes: [{name: PE}]
seeds: [0, 1]
overrides: [model.d_model=32, model.n_heads=2, model.n_layers=1, model.d_ff=64, model.dropout=0.1]
train: {steps: 12, batch_size: 8, curve_points: 3}
eval: {n_examples: 24}
workers: 1
"""


def tiny_cells(tmp_path, pe, extra=""):
    path = tmp_path / f"tiny_{pe}.yaml"
    path.write_text(STUDY.replace("PE", pe).replace("model.dropout=0.1", "model.dropout=0.1" + extra))
    return expand(load_study(str(path)))


def test_a_study_group_gives_each_cell_its_lone_result(tmp_path, capsys):
    cells = tiny_cells(tmp_path, "rope")
    (group,) = seed_groups(cells)
    assert group.cells == cells and group.reason is None and group.name == "k_back_rope_s0-1"
    batched = run_group(cells, tmp_path / "group")
    assert "as one batched model" in capsys.readouterr().out
    for cell, got in zip(cells, batched):
        want = run_cell(cell, tmp_path / "alone")
        for key in ("cell_id", "seed", "pe", "params", "seq_len", "acc_by_length", "id_acc", "ood_acc"):
            assert getattr(got, key) == getattr(want, key), key
        assert [r["step"] for r in got.train_loss] == [r["step"] for r in want.train_loss]
        for a, b in zip(got.train_loss, want.train_loss):
            assert a["loss"] == pytest.approx(b["loss"], rel=RTOL)
        assert [c.step for c in got.curve] == [c.step for c in want.curve]
        assert got.id_loss == pytest.approx(want.id_loss, rel=1e-4)


def test_cells_that_cannot_batch_train_separately_and_say_why(tmp_path, capsys):
    # a setting: attention dropout is drawn inside the kernel
    cells = tiny_cells(tmp_path, "rope", ", model.attn_dropout=0.1")
    groups = seed_groups(cells)
    assert [len(g.cells) for g in groups] == [1, 1] and "model.attn_dropout" in groups[0].reason
    # a model: randomized positions draw in the forward, which vmap refuses (randomness="error")
    cells = tiny_cells(tmp_path, "randomized")
    assert len(seed_groups(cells)) == 1
    results = run_group(cells, tmp_path / "w")
    out = capsys.readouterr().out
    assert "separately" in out and "vmap" in out
    assert [r.cell_id for r in results] == [c.cell_id for c in cells]


def test_groups_split_so_no_worker_idles(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(STUDY.replace("PE", "rope").replace("seeds: [0, 1]", "seeds: [0, 1, 2]"))
    cells = expand(load_study(str(path)))
    assert [len(g.cells) for g in seed_groups(cells, workers=1)] == [3]
    assert [len(g.cells) for g in seed_groups(cells, workers=2)] == [2, 1]  # longest first
    assert [len(g.cells) for g in seed_groups(cells, batch=False)] == [1, 1, 1]


def test_a_study_batches_seeds_only_when_asked(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(STUDY.replace("PE", "rope"))
    run_study(load_study(str(path)), tmp_path / "batched", progress=False, batch_seeds=True)
    run_study(load_study(str(path)), tmp_path / "alone", progress=False)
    logs = {p.name for p in (tmp_path / "batched" / "logs").glob("*.log")}
    assert logs == {"k_back_rope_s0-1.log"}
    assert "as one batched model" in (tmp_path / "batched" / "logs" / "k_back_rope_s0-1.log").read_text()
    assert {p.name for p in (tmp_path / "alone" / "logs").glob("*.log")} == {"k_back_rope_s0.log", "k_back_rope_s1.log"}
    batched, alone = (json.loads((tmp_path / d / "results.json").read_text())["cells"] for d in ("batched", "alone"))
    assert [c["cell_id"] for c in batched] == [c["cell_id"] for c in alone]
    for a, b in zip(batched, alone):
        assert a["train_loss"][0]["loss"] == pytest.approx(b["train_loss"][0]["loss"], rel=RTOL)
