"""A study cell's saved config says what trained it: the task's own rows (train.stream=task, data.task), not the
default pretraining mix, so every reader (eval, the app, export) treats the checkpoint as a task model."""

from posbench.config import RunConfig
from posbench.config_loader import load
from posbench.data.tasks.source import TaskSource
from posbench.data.tasks.task import build_task
from posbench.evaluation.suites.algorithmic import pretrained_with_mix, trained_tasks
from posbench.studies.cell_config import cell_config
from posbench.studies.study_spec import expand, load_study
from posbench.training.batch_sources import build_stream
from posbench.training.meta import run_config_yaml


def _cell(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ntasks: [{name: k_back, k: 2}]\npes: [{name: rope}]\nseeds: [0]\n"
                    "train: {steps: 2, batch_size: 2}\n"
                    "overrides: [model.d_model=16, model.n_heads=2, model.n_layers=1, model.d_ff=32]\n")
    return expand(load_study(str(path)))[0]


def test_a_cell_config_names_its_task_and_no_mix(tmp_path):
    """Item 1: the cell's config.yaml records its task source (train.stream=task, data.task with the
    cell's options) and drops the default pretraining mix; loaded back it is not 'pretrained with a mix', and
    train.py's stream builder reads the task's rows from it."""
    cell = _cell(tmp_path)
    task = build_task(cell.task)
    cfg = cell_config(cell, task, tmp_path / "work")
    assert cfg.train.stream == "task"
    assert cfg.data.task.name == "k_back" and cfg.data.task.k == 2
    assert not cfg.data.mix.tasks
    saved = tmp_path / "config.yaml"
    saved.write_text(run_config_yaml(cfg))
    back = load(RunConfig, [saved]).resolve()
    assert back.train.stream == "task" and back.data.task.k == 2
    assert not pretrained_with_mix(back)
    assert [t.name for t in trained_tasks(back)] == ["k_back"] and trained_tasks(back)[0].k == 2
    x, y = build_stream(back).samples([0, 1])
    ref_x, ref_y = TaskSource(task, cfg.model.seq_len, cell.seed, n_val=64).samples([0, 1])
    assert x.tolist() == ref_x.tolist() and y.tolist() == ref_y.tolist()


def test_a_study_asked_for_wandb_logs_one_run_per_cell_grouped_by_the_study(tmp_path):
    """Item 5: `overrides: [logging.wandb=offline]` gives each cell a WandB run named by the cell and
    grouped by the study (the group was empty: cells of one study lay apart); off by default."""
    path = tmp_path / "w.yaml"
    path.write_text("name: wstudy\ntasks: [{name: k_back, k: 2}]\npes: [{name: rope}]\nseeds: [0, 1]\n"
                    "overrides: [logging.wandb=offline]\n")
    cells = expand(load_study(str(path)))
    cfgs = [cell_config(c, build_task(c.task), tmp_path / "work") for c in cells]
    assert [c.logging.wandb for c in cfgs] == ["offline", "offline"]
    assert [c.logging.group for c in cfgs] == ["wstudy", "wstudy"]
    assert [c.train.run_name for c in cfgs] == [c.cell_id for c in cells]
    default = cell_config(_cell(tmp_path), build_task(_cell(tmp_path).task), tmp_path / "work")
    assert default.logging.wandb == "disabled"
