"""The Protocol sections of a study's and a sweep's report (the parts, and an evaluation's, are in
evaluation/protocol.py): the same items from the study's or sweep's own resolved settings."""

from __future__ import annotations

from pathlib import Path

from posbench.config_loader import changes
from posbench.evaluation.protocol import code_line, machine_line, model_line, parameter_count, run_items, task_settings


def study_items(study, devices: str = "") -> list[tuple[str, str]]:
    """A study's protocol: per task its settings and token lengths (training, ID and OOD examples), the model of
    its first cell with each row's parameter count, the optimizer and schedule, the evaluation and its terms."""
    from posbench.data.tasks.task import build_task
    from posbench.studies.cell_config import cell_config
    from posbench.studies.study_spec import expand

    cells = expand(study)
    first: dict[str, object] = {}
    for cell in cells:  # one cell per (task, row): seeds and vary axes share the model's shape
        first.setdefault((cell.task.name, cell.label), cell)
    tasks = {t.name: build_task(t) for t in study.tasks}
    # the configs name a work directory; nothing is written there, they are only read
    configs = {key: cell_config(c, tasks[key[0]], Path("work")) for key, c in first.items()}
    some = next(iter(configs.values()))
    counts = {}
    for (_task, label), cfg in configs.items():
        counts.setdefault(label, parameter_count(cfg))
    lengths = "; ".join(f"`{name}`: training rows up to {t.max_tokens('train')} tokens, ID examples up to "
                        f"{t.max_tokens('id')}, OOD examples up to {t.max_tokens('ood')}"
                        for name, t in tasks.items())
    ev, st = study.eval, study.train
    return [("Tasks", "; ".join(task_settings(t) for t in study.tasks)),
            ("Lengths (tokens)", lengths),
            ("Cells", (f"{len(cells)}: " if study.sequential is None else f"up to {len(cells)}: ")
             + f"{len(study.tasks)} tasks x {len(study.rows())} rows x seeds "
             + (f"{list(study.seeds)}" if study.sequential is None else
                f"sequential {study.sequential.text()} (start:max:step; the section Sequential seeds)")
             + (f" x {dict(study.vary)}" if study.vary else "")),
            *run_items(some, counts),
            ("Training", f"{st.steps} steps of batch {st.batch_size} rows, lr {st.lr:g}, warmup {st.warmup_frac:.0%}"
                         f", decay {st.decay_frac:.0%}, {st.curve_points} learning-curve points"),
            ("Evaluation", f"{ev.n_examples} examples per split (the same for every cell, eval seed {ev.seed}); "
                           f"accuracy per target position under teacher forcing; {ev.confidence:.0%} intervals"),
            ("Terms", "*OOD beyond train length*: accuracy on the OOD examples' target positions past the training "
                      "length; *OOD all positions*: on all their target positions; *OOD success (beyond, >= "
                      f"{ev.success_threshold:.0%})*: the share of seeds whose beyond-length accuracy reaches "
                      f"{ev.success_threshold:.0%}"),
            ("Code", code_line()),
            ("Machine", machine_line(devices))]



def sweep_items(sweep, runs) -> list[tuple[str, str]]:
    """A sweep's protocol: the first run's model, optimizer and schedule, each (size, PE)'s parameter count, the
    evaluation settings, the code and the machine."""
    first = runs[0].cfg
    counts = {}
    for run in runs:
        counts.setdefault(f"{run.size}/{run.pe}", parameter_count(run.cfg))
    # the typed settings keep no trace of which keys the spec wrote: what they change from the defaults is said
    set_here = ", ".join(f"{k} {v}" for k, v in changes(sweep.eval, type(sweep.eval)()).items())
    evaluation = "eval.py's defaults" + (f" except {set_here}" if set_here else "")
    return [*run_items(first, counts),
            ("Sizes", "; ".join(f"{run.size}: {model_line(run.cfg)}" for run in
                                {r.size: r for r in runs}.values())),
            ("Evaluation", evaluation),
            ("Code", code_line()),
            ("Machine", machine_line())]
