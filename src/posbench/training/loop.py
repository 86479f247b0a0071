"""The training loop, readable top to bottom (nanoGPT style). Setup decisions made once before the first step
live in their own files: device.py (device and precision), plan.py (batches, budgets, schedule), rundir.py
(directory, identity, lock), resume.py (stop flag, what to continue from), loggers.py, meta.py."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable

import torch

from posbench.config import RunConfig
from posbench.config_loader import to_dict
from posbench.errors import ConfigError, NonFiniteError  # NonFiniteError: exit code 3; importable from here as before
from posbench.model.build import build_model
from posbench.model.flops import stats_of
from posbench.pe import PositionRangeError
from posbench.threads import choose_threads
from posbench.training import checkpoint as ckpt
from posbench.training import distributed as dist
from posbench.training.batch_sources import BatchSource, bind_documents, micro_indices, positions_on, val_indices
from posbench.training.device import choose_precision, device_type_for
from posbench.training.loggers import make_logger
from posbench.training.meta import meta_json
from posbench.training.metrics import (
    grad_norms_by_layer,
    logit_stats,
    mfu,
    output_entropy,
    peak_flops,
    peak_memory_gib,
    weight_norm,
)
from posbench.training.optim import build_optimizer, set_lr
from posbench.training.plan import accum_steps, describe, loss_chunk_tokens, make_plan
from posbench.training.resume import (
    StopFlag,
    check_checkpoint_config,
    check_data_content,
    check_drop_consistent,
    check_resume_compatible,
    resume_source,
)
from posbench.training.rundir import choose_run_dir, format_tokens, identity, lock_run_dir
from posbench.training.start_notes import start_notes

Snapshots = Callable[[int, torch.nn.Module], None]


def train(cfg: RunConfig, source: BatchSource, snapshots: Snapshots | None = None) -> dict:
    """Train until the run's budget (or train.max_steps); returns a summary dict.

    `snapshots(step, model)`, single-process runs only: the periodic checkpoints of train.ckpt_interval
    go to it in memory instead of to disk, and it sees the final model once the final checkpoint is saved
    (a study scores its learning curve this way, without writing and re-loading each checkpoint). It gets
    the model in eval mode under no_grad; training mode and every RNG state are restored afterwards, so
    whatever it runs cannot change the training that follows."""
    with contextlib.ExitStack() as held:  # releases the run directory's lock however training ends
        return _train(cfg, source, held, snapshots)


def check_window_positions(model: torch.nn.Module, seq_len: int) -> None:
    """ConfigError when the model's PE cannot represent a training window's positions (a learned or randomized table
    shorter than model.seq_len). A PE that reads the data's own ids (abacus, coupled) is checked on the ids as they
    come (the step turns its PositionRangeError into the same error)."""
    pe = getattr(model, "pe", None)
    if pe is None or pe.reads_data_positions():
        return
    try:
        pe.check_positions(seq_len)
    except PositionRangeError as e:
        raise ConfigError(e.training_advice()) from None


def _snapshot(snapshots: Snapshots, step: int, model: torch.nn.Module) -> None:
    rng, was_training = ckpt.rng_state(), model.training
    model.eval()
    with torch.no_grad():
        snapshots(step, model)
    model.train(was_training)
    ckpt.set_rng_state(rng)


def _train(cfg: RunConfig, source: BatchSource, held: contextlib.ExitStack, snapshots: Snapshots | None) -> dict:
    device_type = device_type_for(cfg)
    device = dist.init(device_type)
    world, rank = dist.world_size(), dist.rank()
    if snapshots is not None and world > 1:
        raise ValueError("train(snapshots=...) hands the model to a callback in memory: single-process runs only")
    accum_steps(cfg, world)  # the batch arithmetic, checked before a model is built
    cfg = bind_documents(cfg, source)  # model.packing's document boundary, from the data (saved with the config)
    torch.manual_seed(cfg.seed)
    # the run's one model; the plan reads its size. train.loss picks the fused chunked head + loss (model/loss.py),
    # in larger chunks under train.compile (plan.loss_chunk_tokens)
    model = build_model(cfg.model, cfg.pe, device_type, loss_chunk_tokens(cfg))
    check_window_positions(model, cfg.model.seq_len)  # a learned table shorter than the window: before any file
    plan = make_plan(cfg, world, device_type, stats_of(model, cfg.model))  # budgets, schedule: before any work
    ident = identity(cfg, source.fingerprint)
    content = source.content  # each shard's size and ends: names and counts (ident) miss a rebuilt shard
    run_dir, existed = choose_run_dir(cfg, plan.end_tokens, ident)
    lock_run_dir(run_dir, held)  # before touching anything in it: one run per directory
    ckpt.cleanup_partial(run_dir)
    ckpt.repair_links(run_dir)  # a `cp -rL` copy's `latest` directory becomes a link again, before any training
    dist.barrier()
    loaded = resume_source(cfg, run_dir, existed, print if dist.is_main() else (lambda *_: None))
    if loaded is not None:
        check_checkpoint_config(loaded)  # its config.yaml, meta.json and step agree: exit 4 naming the field
        check_resume_compatible(cfg, loaded, ident)
        check_data_content(cfg, loaded, content)  # the same shard bytes the checkpoint was trained on
        check_drop_consistent(loaded, plan.drop_pe_tokens)  # DroPE: a dropped PE is not put back
        ckpt.check_state_matches(model.state_dict(), loaded.model, loaded.path / "model.pt")  # one line, exit 4
    # the run's thread count, before the first step: a resume keeps the checkpoint's (posbench/threads.py)
    threads, note = choose_threads(cfg.train.threads, loaded.meta.get("threads") if loaded is not None else None)
    torch.set_num_threads(threads)

    model = model.to(device)  # after the checks above: no device memory is spent on a run that fails them
    wrapped = dist.wrap_model(model, cfg.train.parallel, device)
    optimizer = build_optimizer(model, cfg.optim, device_type)
    precision = choose_precision(cfg.train.precision, device_type)
    step_fn = torch.compile(wrapped) if cfg.train.compile else wrapped

    step, tokens, parent, run_id, best_val, best_step = 0, 0, None, "", math.inf, -1
    if loaded is not None:
        dist.load_full_state(wrapped, optimizer, loaded.model, loaded.optim)
        step, tokens = loaded.meta["step"], loaded.meta["tokens"]
        if loaded.path.parent == run_dir:  # a branch starts its own record
            best_val = loaded.meta.get("best_val_loss") or math.inf
        run_id = loaded.meta.get("wandb_id", "") if loaded.path.parent == run_dir else ""
        parent = loaded.meta.get("parent")
        if cfg.train.branch_from and loaded.path.parent != run_dir:  # a new branch run starts here
            parent = {"checkpoint": str(loaded.path), "run": loaded.path.parent.name,
                      "run_dir": str(loaded.path.parent), "step": step, "tokens": tokens}
        if loaded.rng is not None:
            ckpt.set_rng_state(loaded.rng)
    resumed_here = loaded is not None and loaded.path.parent == run_dir  # (a branch starts its own metrics)
    logger = make_logger(cfg, run_dir, run_id, parent, resumed_step=step if resumed_here else None)
    run_id = logger.run_id or run_id
    if dist.is_main():
        logger.message(describe(cfg, plan, run_dir) + f" | {threads} thread{'s' * (threads > 1)}"
                       + (f" | resumed from {loaded.path}" if loaded else ""))
        for line in ([note] if note else []) + start_notes(cfg, getattr(model, "pe", None)):
            logger.message(line)

    def save(kind: str) -> None:
        model_state, optim_state = dist.full_state(wrapped, optimizer)
        meta = meta_json(step, tokens, plan, kind, ident, run_id, parent, source.tokenizer_fingerprint,
                         best_val if math.isfinite(best_val) else None, to_dict(cfg.model.packing),
                         dropped_at if pe_dropped else None, content)
        meta["threads"] = threads  # the count a resume with train.threads=auto reuses (posbench/threads.py)
        path = ckpt.save(run_dir, step, model_state, optim_state, meta, cfg.to_yaml())
        ckpt.prune(run_dir, cfg.train.keep_last)
        logger.message(f"saved {kind} checkpoint {path}")

    pe_dropped = False  # DroPE: set at plan.drop_pe_tokens; from then on `cfg` (saved with every checkpoint) says so
    # when it was dropped: the checkpoint's record on a resume past the drop, kept in every later meta.json
    dropped_at = loaded.meta.get("pe_dropped_at_tokens") if loaded is not None else None
    stop = StopFlag()
    gbt, mb, accum = cfg.train.global_batch_tokens, cfg.train.micro_batch, plan.accum
    peak = peak_flops(device)
    steps_this_run, t_last, tokens_last = 0, time.perf_counter(), tokens
    inject_nan = os.environ.get("POSBENCH_INJECT_NAN", "")  # "step,rank": fault injection for tests
    try:
        while tokens < plan.end_tokens:
            # a branch checkpoint before the first step after which that budget's LR would decay
            for point, budget in plan.branch_points.items():
                link = run_dir / f"branch_{format_tokens(budget)}"
                if tokens <= point < tokens + gbt and not link.is_symlink():
                    save("branch")
                    if dist.is_main():
                        link.symlink_to(ckpt.step_dir(run_dir, step).name)
            # DroPE: a pure function of tokens seen, like the LR, so a run resumed past the point drops at once.
            # After the branch checkpoint above, whose weights were all trained with the PE.
            if plan.drop_pe_tokens is not None and tokens >= plan.drop_pe_tokens and not pe_dropped:
                cfg, pe_dropped = dataclasses.replace(cfg, pe=model.pe.drop()), True
                if dropped_at is None:
                    dropped_at = plan.drop_pe_tokens
                    logger.message(f"dropped the PE at {tokens:,} tokens (step {step}); training goes on as NoPE")
                else:  # resumed past the drop: say when it happened, as the checkpoint records, not "now"
                    logger.message(f"the PE was dropped at {dropped_at:,} tokens (as the checkpoint records); "
                                   f"resumed at {tokens:,} tokens (step {step}), training goes on as NoPE")
            lr = plan.schedule.lr(tokens)
            set_lr(optimizer, lr)

            loss_sum = torch.zeros((), device=device)
            log_now = (step + 1) % cfg.train.log_interval == 0 or tokens + gbt >= plan.end_tokens
            for micro in range(accum):
                rows = source.samples(micro_indices(step, micro, mb, accum, rank, world))
                x, y = rows[0].to(device, non_blocking=True), rows[1].to(device, non_blocking=True)
                data_pos = positions_on(rows, device)
                last = micro == accum - 1
                sync = last or not hasattr(wrapped, "no_sync")
                with (torch.enable_grad() if sync else wrapped.no_sync()), precision.autocast():
                    # the fused loss's logit moments cost passes over the logits: asked on log steps only
                    try:
                        out = step_fn(x, y, logit_moments=log_now, data_pos_BT=data_pos)
                    except PositionRangeError as e:  # evaluation's "n/a" is training's config error (exit 2)
                        raise ConfigError(e.training_advice()) from None
                loss = out.loss
                if inject_nan == f"{step},{rank}":
                    loss = loss * float("nan")
                precision.backward(loss / accum)
                loss_sum += loss.detach() / accum

            precision.unscale(optimizer)
            log_now = (step + 1) % cfg.train.log_interval == 0 or tokens + gbt >= plan.end_tokens
            # per-group norms of the unclipped gradients, read here because clipping rescales them and
            # zero_grad frees them; collective under FSDP, so every rank computes them
            layer_norms = grad_norms_by_layer(model) if log_now else {}
            clip = cfg.train.grad_clip if cfg.train.grad_clip > 0 else float("inf")
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
            # the loss is local to a rank, gradients are already all-reduced: a NaN loss names its source.
            # One host sync per step: the finite checks and the stop flag travel in one tensor.
            bad_loss, bad_grad, stop_now = dist.step_check(loss_sum, grad_norm, stop.raised)
            if bad_loss >= 0 or bad_grad >= 0:
                what, where = ("loss", bad_loss) if bad_loss >= 0 else ("gradient", bad_grad)
                raise NonFiniteError(f"non-finite {what} at step {step} on rank {where} (loss {loss_sum.item()}, "
                                     f"grad norm {grad_norm.item()}); stopped before the optimizer step on all "
                                     f"ranks. Lower optim.lr or check the data.")
            precision.step(optimizer)
            optimizer.zero_grad(set_to_none=True)
            step, tokens, steps_this_run = step + 1, tokens + gbt, steps_this_run + 1

            if log_now:
                # what this log row reads from the device goes to the host in one transfer (log steps only)
                on_device = {"loss": dist.all_reduce_sum(loss_sum.clone()) / world, "grad_norm": grad_norm,
                             "weight_norm": weight_norm(model), **layer_norms}  # weights after the step
                if dist.is_main():
                    on_device["output_entropy"] = output_entropy(out)
                values = dict(zip(on_device, torch.stack([v.float().reshape(()) for v in on_device.values()]).tolist()))
                now = time.perf_counter()
                tps = (tokens - tokens_last) / max(now - t_last, 1e-9)
                t_last, tokens_last = now, tokens
                row = {"step": step, "tokens": tokens, **values, "ppl": math.exp(min(values["loss"], 80.0)), "lr": lr,
                       "tokens_per_s": tps, "eta_s": (plan.end_tokens - tokens) / max(tps, 1e-9),
                       **peak_memory_gib(device)}
                if peak:  # no known peak (a CPU, an unlisted GPU): no mfu at all, never a made-up 0%
                    row["mfu"] = mfu(plan.flops_per_token, tps, peak, world)
                if dist.is_main():
                    row.update(logit_stats(out))
                logger.log(row)
            # and once at the end, so a sweep's metric is the final model's
            if cfg.train.eval_interval and (step % cfg.train.eval_interval == 0 or tokens >= plan.end_tokens):
                val = evaluate(cfg, wrapped, source, device, precision)
                # `val/loss` is what WandB sweeps optimise (configs/wandb_sweeps/); `val_loss` stays for old readers
                logger.log({"step": step, "tokens": tokens, "val/loss": val, "val_loss": val,
                            "val/ppl": math.exp(min(val, 80.0))})
                if cfg.train.keep_best and val < best_val:
                    best_val, best_step = val, step  # same on every rank: val is averaged over ranks
                    save("best")
                    ckpt.point_link(run_dir, "best", ckpt.step_dir(run_dir, step))
            if stop_now:  # read with the finite check above, on every rank alike
                save("signal")
                logger.message(f"stopped by signal at step {step}; resume with --resume auto")
                return {"run_dir": str(run_dir), "step": step, "tokens": tokens, "stopped": True}
            if cfg.train.max_steps and steps_this_run >= cfg.train.max_steps:
                save("periodic")
                return {"run_dir": str(run_dir), "step": step, "tokens": tokens, "stopped": True}
            if cfg.train.ckpt_interval and step % cfg.train.ckpt_interval == 0 and tokens < plan.end_tokens \
                    and best_step != step:  # not twice: this very step was just saved as `best`
                if snapshots is None:
                    save("periodic")
                else:
                    _snapshot(snapshots, step, model)
        save("final")
        if snapshots is not None:
            _snapshot(snapshots, step, model)
        return {"run_dir": str(run_dir), "step": step, "tokens": tokens, "stopped": False}
    finally:
        stop.restore()
        logger.finish()


@torch.no_grad()
def evaluate(cfg: RunConfig, model, source: BatchSource, device, precision) -> float:
    """Mean loss over the fixed validation rows, averaged over ranks."""
    was_training = model.training
    model.eval()
    total = torch.zeros((), device=device)
    for b in range(cfg.train.eval_batches):
        idx = val_indices(b, cfg.train.micro_batch, dist.rank(), dist.world_size(), source.n_val())
        rows = source.val_samples(idx)
        with precision.autocast():
            loss = model(rows[0].to(device), rows[1].to(device), data_pos_BT=positions_on(rows, device)).loss
        total += loss.float()
    model.train(was_training)
    return dist.all_reduce_sum(total).item() / (cfg.train.eval_batches * dist.world_size())
