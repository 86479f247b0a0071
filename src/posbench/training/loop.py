"""The training loop, readable top to bottom (nanoGPT style): set up once, then step until the budget, each step
followed by the end-of-step policies, then the final checkpoint. Setup lives in start.py (model, plan, run
directory, what to continue from), the step in step.py, the policies between steps (logging, validation, stops,
checkpoints, the schedule's branch points and DroPE's drop) in end_of_step.py, what the loop carries from step to
step in state.py."""

from __future__ import annotations

import contextlib

from posbench.config import RunConfig
from posbench.training.batch_sources import BatchSource
from posbench.training.end_of_step import after_step, finish, kept_branch_links, schedule_points
from posbench.training.start import Snapshots, start_run
from posbench.training.step import train_step


def train(cfg: RunConfig, source: BatchSource, snapshots: Snapshots | None = None) -> dict:
    """Train until the run's budget (or train.max_steps); returns TrainState.summary (state.py): run_dir, step,
    tokens, stopped, late_signal.

    `snapshots(step, model)`, single-process runs only: the periodic checkpoints of train.ckpt_interval
    go to it in memory instead of to disk, and it sees the final model once the final checkpoint is saved
    (a study scores its learning curve this way, without writing and re-loading each checkpoint). It gets
    the model in eval mode under no_grad; training mode and every RNG state are restored afterwards, so
    whatever it runs cannot change the training that follows."""
    with contextlib.ExitStack() as held:  # releases the run directory's lock however training ends
        run = start_run(cfg, source, held, snapshots)
        try:
            kept_branch_links(run)  # a branch checkpoint deleted since: saved again at its point, or reported
            schedule_points(run)  # a run resumed at a branch point or past DroPE's drop reaches them first
            while run.state.tokens < run.plan.end_tokens:
                done = train_step(run)
                stopped = after_step(run, done)
                if stopped is not None:
                    return stopped
            return finish(run)
        finally:
            run.stop.restore()
            run.logger.finish()
