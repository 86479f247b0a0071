"""A sweep's wall-time estimate on this machine, printed before its first run: the study's estimator
(`studies/cost.cost`, the quickstart's measured rate scaled by this machine's matmul speed) over the training FLOPs
(6 x params x tokens) of the runs still to train. A branch run trains only its cooldown: from its budget's decay
start on the main run to its budget."""

from __future__ import annotations

from pathlib import Path

from posbench.studies.cost import CostEstimate, cost
from posbench.sweeps import execute
from posbench.sweeps.sweep_spec import Run
from posbench.training.device import pick_device
from posbench.training.plan import make_plan


def on_cpu(runs: list[Run]) -> bool:
    """Every run trains on the CPU here (the quickstart's CPU rate says nothing about a GPU)."""
    return all(r.cfg.train.device != "cuda" and pick_device(r.cfg.train.device, "") == "cpu" for r in runs)


def sweep_estimate(runs: list[Run], out_dir: Path, workers: int) -> CostEstimate:
    plans = {r.name: make_plan(r.cfg, 1, "cpu") for r in runs}  # on the meta device: no model is built
    todo = [r for r in runs if not execute.is_done(out_dir, r)]
    flop = 0.0
    for run in todo:
        plan = plans[run.name]
        start = 0
        if run.parent:  # the main run's decay start for this budget: where the branch checkpoint is
            starts = {budget: decay for decay, budget in plans[run.parent].branch_points.items()}
            start = starts.get(plan.end_tokens, 0)
        flop += 6.0 * plan.n_params * (plan.end_tokens - start)
    return cost(len(runs), len(todo), flop, workers, unit="runs")
