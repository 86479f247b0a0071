"""Rows of one architecture batched together (studies/batched_train.py, studies/seed_groups.py): members whose
PE options differ but whose tensors stack (RoPE at two bases) each follow their lone run (`training.loop.train`,
the reference) up to float rounding; options that change the code (a window) are caught before any step and the
rows train as one group per PE, saying so; a group's rows are read from tables on its device, one per (task,
seed), shared by the members that read them."""

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from posbench.cli.study import main as study_main
from posbench.config import RunConfig
from posbench.config_loader import load
from posbench.data.tasks.source import TaskSource
from posbench.data.tasks.task import build_task
from posbench.studies.batched_train import BatchedGroup, MembersDiffer, train_group
from posbench.studies.cell import run_cell, run_group
from posbench.studies.device_rows import DeviceRows
from posbench.studies.row_cache import CachedRows
from posbench.studies.seed_groups import seed_groups
from posbench.studies.study_spec import expand, load_study
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from tests.studies.test_batched_seeds import RTOL, STUDY, max_rel, one_thread, weights  # noqa: F401 (autouse)
from tests.studies.test_study import mini

STEPS, BATCH, T, V = 30, 8, 16, 11




def run_cfg(pe: dict, seed: int, out: Path) -> RunConfig:
    return load(RunConfig, overrides=[{
        "model": {"size": "tiny", "d_model": 32, "n_heads": 2, "n_layers": 2, "d_ff": 64, "vocab_size": V,
                  "seq_len": T, "dropout": 0.1},
        "pe": pe, "seed": seed,
        "train": {"out_dir": str(out), "run_name": f"{pe['name']}_{len(str(pe))}_s{seed}", "budget_unit": "tokens",
                  "target_budgets": [STEPS * BATCH * T], "global_batch_tokens": BATCH * T, "micro_batch": BATCH,
                  "log_interval": 1, "eval_interval": 0, "ckpt_interval": STEPS, "device": "cpu", "grad_clip": 0.3},
        "logging": {"wandb": "disabled"}}]).resolve()


MEMBERS = [({"name": "rope"}, 0), ({"name": "rope", "theta": 500.0}, 0), ({"name": "rope", "theta": 500.0}, 1)]


def test_rope_rows_at_two_bases_batch_and_each_member_is_its_lone_run(tmp_path):
    cfgs = [run_cfg(pe, s, tmp_path / "b") for pe, s in MEMBERS]
    snaps = [{} for _ in cfgs]
    rows = train_group(cfgs, [RandomTokens(V, T, s) for _, s in MEMBERS],
                       lambda m, step, model: snaps[m].__setitem__(step, weights(model)))
    for m, (pe, s) in enumerate(MEMBERS):
        lone = {}
        result = train(run_cfg(pe, s, tmp_path / "lone"), RandomTokens(V, T, s),
                       snapshots=lambda step, model: lone.__setitem__(step, weights(model)))
        want = [json.loads(line) for line in (Path(result["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
        want = [r["loss"] for r in want if "loss" in r]
        assert [r["loss"] for r in rows[m]] == pytest.approx(want, rel=RTOL), m
        for name, w in lone[STEPS].items():
            assert max_rel(snaps[m][STEPS][name], w) < RTOL, (m, name)
    # the control that the comparison above sees each member's own PE: members 0 and 1 share seed and data and
    # differ only in RoPE's base, and their losses part by far more than the tolerance
    assert [r["loss"] for r in rows[1]] != pytest.approx([r["loss"] for r in rows[0]], rel=10 * RTOL)


def test_a_window_does_not_stack_and_is_caught_before_any_step(tmp_path):
    pes = [{"name": "rnope_swa", "window": 4, "swa_layers": 1}, {"name": "rnope_swa", "window": 12, "swa_layers": 1}]
    with pytest.raises(MembersDiffer, match="do not stack"):
        BatchedGroup([run_cfg(pe, 0, tmp_path) for pe in pes], [RandomTokens(V, T, 0)] * 2)
    # the same window twice (two seeds) stacks: the check is not what refused above
    BatchedGroup([run_cfg(pes[0], s, tmp_path) for s in (0, 1)], [RandomTokens(V, T, s) for s in (0, 1)])


def two_rows(tmp_path, first_pe: str, second_pe: str) -> list:
    """A study of two rows (the second an arm, so two PEs of one family get two labels), two seeds each."""
    path = tmp_path / "rows.yaml"
    study = STUDY.replace("model.n_layers=1", "model.n_layers=2")  # RNoPE-SWA: a windowed layer, a full one
    rows = f"pes: [{first_pe}]\narms: [{{label: second, pe: {second_pe}}}]"
    path.write_text(study.replace("pes: [{name: PE}]", rows))
    return expand(load_study(str(path)))


def rope_study(tmp_path, second_pe: str) -> list:
    return two_rows(tmp_path, "{name: rope}", second_pe)


def test_rows_whose_tensors_stack_group_together_and_others_do_not(tmp_path):
    cells = rope_study(tmp_path, "{name: rope, theta: 500.0}")
    (group,) = seed_groups(cells)
    assert group.cells == cells and group.name.endswith("_and_1_s0-1-0-1")
    assert [len(g.cells) for g in seed_groups(rope_study(tmp_path, "{name: alibi}"))] == [2, 2]  # other family
    assert [len(g.cells) for g in seed_groups(rope_study(tmp_path, "{name: rope, rotary_fraction: 0.5}"))] == [2, 2]


def test_a_row_group_that_does_not_stack_trains_one_group_per_pe(tmp_path, capsys):
    cells = two_rows(tmp_path, "{name: rnope_swa, window: 4, swa_layers: 1}",
                     "{name: rnope_swa, window: 12, swa_layers: 1}")
    (group,) = seed_groups(cells)
    results = run_group(group.cells, tmp_path / "w")
    out = capsys.readouterr().out
    assert "as one group per PE" in out and "do not stack" in out
    assert out.count("as one batched model") == 2  # then each PE's seeds together
    assert [r.cell_id for r in results] == [c.cell_id for c in group.cells]
    want = run_cell(group.cells[2], tmp_path / "alone")
    assert results[2].id_acc == want.id_acc
    assert results[2].train_loss[0]["loss"] == pytest.approx(want.train_loss[0]["loss"], rel=RTOL)


def test_members_of_one_task_and_seed_share_one_table_on_the_device(tmp_path):
    task = build_task(load_study(str(_write(tmp_path))).tasks[0])
    sources = [CachedRows(TaskSource(task, 24, seed, n_val=4), 40, tmp_path) for seed in (0, 0, 1)]
    rows = DeviceRows(sources, torch.device("cpu"))
    assert len(rows.tables) == 2 and rows.members[0] is rows.members[1] is not rows.members[2]
    x_MBT, y_MBT = rows.batch(list(range(8, 16)))
    for m, s in enumerate(sources):
        want = s.samples(list(range(8, 16)))
        assert torch.equal(x_MBT[m], want[0]) and torch.equal(y_MBT[m], want[1])
    assert not torch.equal(x_MBT[0], x_MBT[2])  # seeds 0 and 1: other rows


def _write(tmp_path) -> Path:
    path = tmp_path / "one.yaml"
    path.write_text(STUDY.replace("PE", "rope"))
    return path


def test_workers_starting_one_task_and_seed_at_once_generate_its_rows_once(tmp_path):
    task = build_task(load_study(str(_write(tmp_path))).tasks[0])
    calls = []

    class Counted(TaskSource):
        def samples(self, indices):
            calls.append(len(indices))
            time.sleep(0.2)  # generation takes a while: the other worker arrives meanwhile
            return super().samples(indices)

    with ThreadPoolExecutor(3) as pool:
        tables = list(pool.map(lambda _: CachedRows(Counted(task, 24, 0, n_val=4), 40, tmp_path / "rows"), range(3)))
    assert calls == [40]  # once, for all three
    assert all(torch.equal(t.x, tables[0].x) for t in tables)


def test_members_under_bf16_autocast_follow_their_lone_bf16_runs(tmp_path):
    """The lone run's precision (train.precision; bf16 is the CUDA default) is the group's: autocast around the
    batched forward, seen in the dtype of the shared module's matmuls (at this size bf16's rounding moves the
    losses no more than the kernels' differences do, so the losses alone could not tell)."""
    seen = []
    for precision in ("bf16", "fp32"):
        cfgs = [run_cfg({"name": "rope"}, s, tmp_path / precision) for s in (0, 1)]
        for c in cfgs:
            c.train.precision = precision
        group = BatchedGroup(cfgs, [RandomTokens(V, T, s) for s in (0, 1)])
        group.probe()
        hook = group.template.blocks[0].attn.qkv.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
        rows = train_group(cfgs, [RandomTokens(V, T, s) for s in (0, 1)], lambda m, step, model: None, group=group)
        hook.remove()
        assert seen[-1] == {"bf16": torch.bfloat16, "fp32": torch.float32}[precision]
        lone = cfgs[1]
        result = train(lone, RandomTokens(V, T, 1))
        want = [json.loads(line) for line in (Path(result["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
        assert [r["loss"] for r in rows[1]] == pytest.approx([r["loss"] for r in want if "loss" in r], rel=5e-3)


def test_the_study_command_batches_on_cpu_only_when_asked(tmp_path):
    spec = str(mini(tmp_path))
    for flag, batched in (([], False), (["--batch-seeds"], True), (["--no-batch-seeds"], False)):
        out = tmp_path / f"out{len(flag)}{batched}"
        assert study_main([spec, "--seeds", "0", "1", "--out", str(out), "--no-progress", *flag]) == 0
        logs = sorted(p.name for p in (out / "logs").glob("*.log"))
        assert (logs == ["k_back_learned_s0-1.log", "k_back_rope_s0-1.log"]) is batched, (flag, logs)
