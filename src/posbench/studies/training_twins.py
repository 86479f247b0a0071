"""Cells of one job whose training is the same run (training twins): rows that differ only in evaluation-time
options (an arm's `rope_scaling` or `dope`, such as long_context's rope_dope beside rope) at one seed. The job
trains each set once and scores every member on that model (studies/cell.py), so such a row reuses its twin's
training instead of repeating it. Derived from the cells' resolved configs, never declared: a row whose training
differs in anything (a PE option, a model setting) is no one's twin."""

from __future__ import annotations

import json

from posbench.config_loader import to_dict


def training_key(cfg) -> str:
    """What decides a cell's training: its resolved RunConfig (the task and seed in it) but for its run name."""
    data = to_dict(cfg)
    data["train"].pop("run_name")
    return json.dumps(data, sort_keys=True, default=str)


def twin_sets(cfgs: list) -> list[list[int]]:
    """Indices of `cfgs` in sets of equal training, each set in the order given, sets by their first member."""
    sets: dict[str, list[int]] = {}
    for i, cfg in enumerate(cfgs):
        sets.setdefault(training_key(cfg), []).append(i)
    return list(sets.values())
