"""Synthetic tasks. Every task is imported here explicitly so the registry is greppable.

    task = build_task(get_task_class("reverse").Config(ood_range=(9, 20)))
    ex = task.example(seed=0, index=7, split="ood")     # ex.prompt, ex.answer, ex.tokens_T, ex.targets_T

`source.TaskSource` trains directly on a task's token form, `mix.TaskMixer` puts task text into the
pretraining stream. Adding a task: one file with a `@TASKS.register("name")` class (see task.py), one
line below, and its independent solver in tests/tasks/.
"""

from posbench.data.tasks import (  # noqa: F401  (imported for their @TASKS.register side effect)
    addition,
    copy_distance,
    k_back,
    kv_retrieval,
    long_range_match,
    modular_sum,
    mqar,
    multiplication,
    needle,
    no_carry_add,
    passkey,
    pig_latin,
    reverse,
    ruler_niah,
    shift_invariant,
    simple_copy,
    sort,
    template,
    variable_tracking,
    word_extraction,
)
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

__all__ = ["IGNORE", "PAD_ID", "SPLITS", "TASKS", "Example", "Filler", "GeneratedFiller", "Task", "TaskConfig",
           "TextFiller", "Vocab", "build_task", "garden_filler", "get_task_class", "task_names"]
