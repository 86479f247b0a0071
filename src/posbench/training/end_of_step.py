"""What happens between two optimizer steps (`after_step`, its order stated there), the checkpoint a run saves
(`save`), and the end of a run that reached its budget (`finish`)."""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import time

import torch

from posbench.config_loader import to_dict
from posbench.training import checkpoint as ckpt
from posbench.training import distributed as dist
from posbench.training.batch_sources import positions_on, val_indices
from posbench.training.meta import meta_json, run_config_yaml
from posbench.training.metrics import logit_stats, mfu, output_entropy, peak_memory_gib, weight_norm
from posbench.training.pe_params import pe_parameter_values
from posbench.training.rundir import format_tokens
from posbench.training.start import Run
from posbench.training.step import StepOut


def after_step(run: Run, done: StepOut) -> dict | None:
    """The end-of-step policies, in this order; the run's summary when it stops here, else None.

    1. The log row (log steps only): it reads this step's loss, gradient norms and output, and the weights just
       updated, before validation or a save runs anything else on the model.
    2. Validation (every train.eval_interval steps, and at the budget's end so a sweep's metric is the final
       model's), then a `best` checkpoint when it improves: before the stop checks, so a run stopped at this step
       has validated it as an uninterrupted run would, and its resume does not validate it again.
    3. The stop signal (SIGTERM/SIGINT, read with this step's finite check, alike on every rank): a `signal`
       checkpoint, then stop; `--resume auto` continues at the next step. Before 4, so a signal at the step
       train.max_steps ends on is reported as the signal it was.
    4. train.max_steps: a checkpoint, then stop (the schedule is the full run's, so a resume continues exactly).
    5. The periodic checkpoint, or the snapshot (train(snapshots=)) in its place: after the stops, which save
       this step themselves; not at the budget's end (the final checkpoint follows) nor at a step just saved as
       `best`.
    6. The branch checkpoint of a budget whose decay starts within the next step (only when there is a next
       step; these last two are the schedule's points, functions of tokens seen, `schedule_points`).
    7. The PE's switch (DroPE's drop, RePo's pe.rope_until), when the next step starts at or past its point. After
       6, so a branch checkpoint's weights were all trained before the switch, as an uninterrupted run of that
       budget has them at its decay start.
    The loop also runs 6 and 7 once before the first step: a run resumed at a branch point or past the switch
    reaches them there.
    """
    if done.log_now:
        log_row(run, done)
    validate(run)
    if done.stop_now:  # read with the finite check, on every rank alike
        save(run, "signal")
        run.logger.message(f"stopped by signal at step {run.state.step}; resume with --resume auto")
        return run.state.summary(run.run_dir, stopped=True)
    if run.cfg.train.max_steps and run.state.steps_this_run >= run.cfg.train.max_steps:
        save(run, "periodic")
        return run.state.summary(run.run_dir, stopped=True)
    periodic_checkpoint(run)
    schedule_points(run)
    return None


def log_row(run: Run, done: StepOut) -> None:
    """One metrics row; what it reads from the device goes to the host in one transfer."""
    state, plan = run.state, run.plan
    on_device = {"loss": dist.all_reduce_sum(done.loss_sum.clone()) / dist.world_size(), "grad_norm": done.grad_norm,
                 "weight_norm": weight_norm(run.model), **done.layer_norms,  # weights after the step
                 **pe_parameter_values(run.model)}
    if dist.is_main():
        on_device["output_entropy"] = output_entropy(done.out)
    values = dict(zip(on_device, torch.stack([v.float().reshape(()) for v in on_device.values()]).tolist()))
    now = time.perf_counter()
    tps = (state.tokens - state.logged_tokens) / max(now - state.logged_at, 1e-9)
    state.logged_at, state.logged_tokens = now, state.tokens
    row = {"step": state.step, "tokens": state.tokens, **values, "ppl": math.exp(min(values["loss"], 80.0)),
           "lr": done.lr, "tokens_per_s": tps, "eta_s": (plan.end_tokens - state.tokens) / max(tps, 1e-9),
           **peak_memory_gib(run.device)}
    if run.peak:  # no known peak (a CPU, an unlisted GPU): no mfu at all, never a made-up 0%
        row["mfu"] = mfu(plan.flops_per_token, tps, run.peak, dist.world_size())
    if dist.is_main():
        row.update(logit_stats(done.out))
    run.logger.log(row)


def validate(run: Run) -> None:
    """Validation on its steps; with train.keep_best, a checkpoint and the `best` link when the loss improves."""
    train, state = run.cfg.train, run.state
    if not train.eval_interval or not (state.step % train.eval_interval == 0 or state.tokens >= run.plan.end_tokens):
        return
    val = evaluate(run)
    # `val/loss` is what WandB sweeps optimise (configs/wandb_sweeps/); `val_loss` stays for old readers
    run.logger.log({"step": state.step, "tokens": state.tokens, "val/loss": val, "val_loss": val,
                    "val/ppl": math.exp(min(val, 80.0))})
    if train.keep_best and val < state.best_val:
        state.best_val, state.best_step = val, state.step  # same on every rank: val is averaged over ranks
        save(run, "best")
        ckpt.point_link(run.run_dir, "best", ckpt.step_dir(run.run_dir, state.step))


def periodic_checkpoint(run: Run) -> None:
    every, state = run.cfg.train.ckpt_interval, run.state
    if not every or state.step % every or state.tokens >= run.plan.end_tokens or state.best_step == state.step:
        return
    if run.snapshots is None:
        save(run, "periodic")
    else:
        snapshot(run)


def schedule_points(run: Run) -> None:
    """Before the next step, when there is one: its branch checkpoint, then DroPE's drop (after_step's 6 and 7)."""
    if run.state.tokens < run.plan.end_tokens:
        branch_checkpoints(run)
        drop_pe(run)


def branch_checkpoints(run: Run) -> None:
    """A branch checkpoint before the first step after which a budget's LR would decay, linked as
    `branch_<budget>` (once: a resumed run finds the link)."""
    state, gbt = run.state, run.cfg.train.global_batch_tokens
    for point, budget in run.plan.branch_points.items():
        link = run.run_dir / f"branch_{format_tokens(budget)}"
        if state.tokens <= point < state.tokens + gbt and not link.is_symlink():
            save(run, "branch")
            if dist.is_main():
                link.symlink_to(ckpt.step_dir(run.run_dir, state.step).name)


def kept_branch_links(run: Run) -> None:
    """Once, before the first step: a branch checkpoint deleted since it was saved (its `branch_<budget>` link points
    at nothing). A run resumed before that budget's point unlinks it, so `branch_checkpoints` saves it again when the
    run passes the point; one resumed past it cannot, and says so (branch runs of that budget start from it)."""
    state = run.state
    for point, budget in run.plan.branch_points.items():
        link = run.run_dir / f"branch_{format_tokens(budget)}"
        if not link.is_symlink() or (link / "meta.json").is_file():
            continue
        gone = f"{link.name} linked to {os.readlink(link)}, which is gone"
        if state.tokens <= point:
            if dist.is_main():
                link.unlink()
            run.logger.message(f"note: {gone}; this run resumes before its point ({point:,} tokens), saving it again "
                               "there")
        else:
            run.logger.message(f"warning: {gone}, and this run resumed past its point ({point:,} tokens; now "
                               f"{state.tokens:,}), so it cannot save it again. Branch runs of that budget "
                               "(--branch-from) need it: restore it, or train this run again from a checkpoint before "
                               "that point under another train.run_name")
    dist.barrier()  # every rank sees the link gone before branch_checkpoints asks


def drop_pe(run: Run) -> None:
    """The PE's switch at its point of the budget (DroPE's drop, RePo's pe.rope_until): a pure function of tokens
    seen, like the LR, so a run resumed past the point switches at once. From then on `run.cfg` (saved with every
    checkpoint) describes the PE after it (`pe.dropped: true`, `pe.switched: true`)."""
    state, point = run.state, run.plan.drop_pe_tokens
    if point is None or state.tokens < point or state.pe_dropped:
        return
    pe = run.model.pe.drop()
    run.cfg, state.pe_dropped = dataclasses.replace(run.cfg, pe=pe), True
    if state.dropped_at is None:
        state.dropped_at = point
        run.logger.message(f"switched the PE at {state.tokens:,} tokens (step {state.step}, {pe.switch_setting}); "
                           f"training goes on {pe.switch_after}")
    else:  # resumed past the switch: say when it happened, as the checkpoint records, not "now"
        run.logger.message(f"the PE switched at {state.dropped_at:,} tokens ({pe.switch_setting}, as the checkpoint "
                           f"records); resumed at {state.tokens:,} tokens (step {state.step}), training goes on "
                           f"{pe.switch_after}")


def save(run: Run, kind: str) -> None:
    """A checkpoint of the run as it is now (collective: every rank calls it)."""
    model_state, optim_state = dist.full_state(run.wrapped, run.optimizer)
    meta = meta_json(run.state, run.plan, kind, run.ident, run.source.tokenizer_fingerprint,
                     to_dict(run.cfg.model.packing), run.content)
    meta["threads"] = run.threads  # the count a resume with train.threads=auto reuses (posbench/threads.py)
    meta["matmul"] = run.matmul  # the library a resume with model.matmul=auto reuses (model/matmul_choice.py)
    path = ckpt.save(run.run_dir, run.state.step, model_state, optim_state, meta, run_config_yaml(run.cfg))
    ckpt.prune(run.run_dir, run.cfg.train.keep_last)
    run.logger.message(f"saved {kind} checkpoint {path}")


def snapshot(run: Run) -> None:
    """The model handed to train(snapshots=) in eval mode under no_grad; training mode and every RNG state are
    restored afterwards, so whatever it runs cannot change the training that follows."""
    rng, was_training = ckpt.rng_state(), run.model.training
    run.model.eval()
    with torch.no_grad():
        run.snapshots(run.state.step, run.model)
    run.model.train(was_training)
    ckpt.set_rng_state(rng)


def finish(run: Run) -> dict:
    """The budget is reached: the final checkpoint, then the final snapshot; a stop signal that arrived after the
    last step's check is returned as `late_signal` (resume.StopFlag)."""
    save(run, "final")
    if run.snapshots is not None:
        snapshot(run)
    late = run.stop.signum
    if late is not None:
        run.logger.message(f"{signal.Signals(late).name} arrived after the last step: the run is complete")
    return run.state.summary(run.run_dir, stopped=False, late_signal=late)


@torch.no_grad()
def evaluate(run: Run) -> float:
    """Mean loss over the fixed validation rows, averaged over ranks."""
    model, train, device = run.wrapped, run.cfg.train, run.device
    was_training = model.training
    model.eval()
    total = torch.zeros((), device=device)
    for b in range(train.eval_batches):
        rows = run.source.val_samples(val_indices(b, train.micro_batch, dist.rank(), dist.world_size(),
                                                  run.source.n_val()))
        with run.precision.autocast():
            loss = model(rows[0].to(device), rows[1].to(device), data_pos_BT=positions_on(rows, device)).loss
        total += loss.float()
    model.train(was_training)
    return dist.all_reduce_sum(total).item() / (train.eval_batches * dist.world_size())
