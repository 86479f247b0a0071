"""Synthetic tasks: one module per task, each registering it with `@TASKS.register`. Importing this package imports
every module in it (posbench.registry.import_members), so a new task file is registered with no list to edit.

    task = build_task(get_task_class("reverse").Config(ood_range=(9, 20)))
    ex = task.example(seed=0, index=7, split="ood")     # ex.prompt, ex.answer, ex.tokens_T, ex.targets_T

`source.TaskSource` trains directly on a task's token form, `mix.TaskMixer` puts task text into the
pretraining stream. Adding a task: one file with a `@TASKS.register("name")` class (see task.py) and its
independent solver in tests/tasks/.
"""

from posbench.data.tasks.filler import Filler, GeneratedFiller, TextFiller, garden_filler
from posbench.data.tasks.task import (
    IGNORE,
    PAD_ID,
    SPLITS,
    TASKS,
    Example,
    Task,
    TaskConfig,
    Vocab,
    build_task,
    get_task_class,
    task_names,
)
from posbench.registry import import_members, load_plugins

import_members(__name__, __path__)
load_plugins("posbench_tasks")  # variants from installed plug-in packages and --plugin (posbench/registry.py)

__all__ = ["IGNORE", "PAD_ID", "SPLITS", "TASKS", "Example", "Filler", "GeneratedFiller", "Task", "TaskConfig",
           "TextFiller", "Vocab", "build_task", "garden_filler", "get_task_class", "task_names"]
