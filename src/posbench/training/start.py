"""Everything a run decides once, before its first step, in this order: the batch arithmetic, the model (seeded),
the plan, the run directory and its lock, what to continue from and its checks, the threads and the linear layers'
library (model.matmul), then the device,
the wrapping, the optimizer and the checkpoint's state. Each check runs before anything it would waste: no file
before the plan holds, no device memory before the resume checks pass. The result is a `Run`, what every step
reads (training/loop.py)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from posbench.config import RunConfig
from posbench.errors import ConfigError
from posbench.model.build import build_model
from posbench.model.flops import stats_of
from posbench.model.matmul import apply_matmul
from posbench.model.matmul_choice import resolve_matmul
from posbench.pe import PositionRangeError
from posbench.threads import choose_threads
from posbench.training import checkpoint as ckpt
from posbench.training import distributed as dist
from posbench.training.batch_sources import BatchSource, bind_documents
from posbench.training.checkpoint_read import check_state_matches, state_problems
from posbench.training.device import FP32, choose_precision, device_type_for
from posbench.training.loggers import Logger, make_logger
from posbench.training.metrics import peak_flops
from posbench.training.optim import build_optimizer
from posbench.training.plan import Plan, accum_steps, describe, loss_chunk_tokens, make_plan
from posbench.training.resume import (
    StopFlag,
    check_checkpoint_config,
    check_data_content,
    check_drop_consistent,
    check_resume_compatible,
    resume_source,
)
from posbench.training.rundir import choose_run_dir, identity, identity_diffs, lock_run_dir
from posbench.training.start_notes import start_notes
from posbench.training.state import TrainState

Snapshots = Callable[[int, torch.nn.Module], None]


@dataclass
class Run:
    """What every step reads; `state` is what it changes."""

    cfg: RunConfig  # DroPE's drop replaces its PE config, so every later checkpoint saves the model as it is
    source: BatchSource
    plan: Plan
    model: torch.nn.Module  # the plain model: its PE, norms and parameters
    wrapped: torch.nn.Module  # under DDP or FSDP: what the step's collectives and validation go through
    step_fn: Callable  # `wrapped`, compiled under train.compile
    optimizer: torch.optim.Optimizer
    precision: FP32
    device: torch.device
    run_dir: Path
    ident: dict  # the run's identity (training/rundir.py), recorded in every meta.json
    content: dict[str, str]  # each token shard's content fingerprint (BatchSource.content), likewise
    threads: int
    matmul: str  # the linear layers' library (model.matmul resolved), recorded in every meta.json like `threads`
    logger: Logger
    stop: StopFlag
    snapshots: Snapshots | None
    peak: float  # the device's peak FLOP/s; 0 when unknown (no `mfu` in the rows)
    state: TrainState


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


def start_run(cfg: RunConfig, source: BatchSource, held: contextlib.ExitStack, snapshots: Snapshots | None) -> Run:
    """The run set up to its first step; the run directory's lock goes on `held`."""
    device_type = device_type_for(cfg)
    device = dist.init(device_type)
    if snapshots is not None and dist.world_size() > 1:
        raise ValueError("train(snapshots=...) hands the model to a callback in memory: single-process runs only")
    accum_steps(cfg, dist.world_size())  # the batch arithmetic, checked before a model is built
    cfg = bind_documents(cfg, source)  # model.packing's document boundary, from the data (saved with the config)
    torch.manual_seed(cfg.seed)
    # the run's one model; the plan reads its size. train.loss picks the fused chunked head + loss (model/loss.py),
    # in larger chunks under train.compile (plan.loss_chunk_tokens)
    # on torch's matmul until the threads and the checkpoint to continue are known: model.matmul=auto is measured
    # on this run's thread count, or taken from the checkpoint's record, below
    model = build_model(cfg.model, cfg.pe, device_type, loss_chunk_tokens(cfg), cfg.model.kernels, matmul="torch",
                        train=True)
    check_window_positions(model, cfg.model.seq_len)  # a learned table shorter than the window: before any file
    plan = make_plan(cfg, dist.world_size(), device_type, stats_of(model, cfg.model))  # budgets, schedule
    ident = identity(cfg, source.fingerprint)
    content = source.content  # each shard's size and ends: names and counts (ident) miss a rebuilt shard
    run_dir, loaded = _open_run_dir(cfg, plan, ident, held)
    if loaded is not None:
        _check_loaded(cfg, loaded, plan, ident, content, model)
    # the run's thread count, before the first step: a resume keeps the checkpoint's (posbench/threads.py)
    threads, note = choose_threads(cfg.train.threads, loaded.meta.get("threads") if loaded is not None else None)
    torch.set_num_threads(threads)
    # the library of the linear layers on those threads, before the model runs: a resume keeps the checkpoint's
    # (model/matmul_choice.py); swapping keeps the very parameters (model/matmul.py)
    matmul, matmul_note = resolve_matmul(cfg.model.matmul, model, cfg.train.micro_batch * cfg.model.seq_len,
                                         device_type, loaded.meta.get("matmul") if loaded is not None else None)
    model = apply_matmul(model, matmul)

    model = model.to(device)  # after the checks above: no device memory is spent on a run that fails them
    # a PE that switches may keep parameters outside the forward until then (RePo's networks before pe.rope_until)
    wrapped = dist.wrap_model(model, cfg.train.parallel, device, unused_params=plan.drop_pe_tokens is not None)
    optimizer = build_optimizer(model, cfg.optim, device_type)
    precision = choose_precision(cfg.train.precision, device_type)
    step_fn = torch.compile(wrapped) if cfg.train.compile else wrapped
    state = TrainState.start(cfg, loaded, run_dir)
    if loaded is not None:
        dist.load_full_state(wrapped, optimizer, loaded.model, loaded.optim)
        if loaded.rng is not None:
            ckpt.set_rng_state(loaded.rng)
    logger = make_logger(cfg, run_dir, state.run_id, state.parent, resumed_step=state.step if state.own_run else None)
    state.run_id = logger.run_id or state.run_id
    if dist.is_main():
        resumed = f" | resumed from {loaded.path}" if loaded is not None else ""
        logger.message(describe(cfg, plan, run_dir) + f" | {threads} thread{'s' * (threads > 1)}" + resumed)
        for line in [n for n in (note, matmul_note) if n] + start_notes(cfg, getattr(model, "pe", None)):
            logger.message(line)
    run = Run(cfg, source, plan, model, wrapped, step_fn, optimizer, precision, device, run_dir, ident, content,
              threads, matmul, logger, StopFlag(), snapshots, peak_flops(device), state)
    state.logged_at = time.perf_counter()
    return run


def _open_run_dir(cfg: RunConfig, plan: Plan, ident: dict,
                  held: contextlib.ExitStack) -> tuple[Path, ckpt.Loaded | None]:
    """The run directory, locked and tidied, and the checkpoint to continue from (None: a fresh start)."""
    run_dir, existed = choose_run_dir(cfg, plan.end_tokens, ident)
    lock_run_dir(run_dir, held)  # before touching anything in it: one run per directory
    ckpt.cleanup_partial(run_dir)
    ckpt.repair_links(run_dir)  # a `cp -rL` copy's `latest` directory becomes a link again, before any training
    dist.barrier()
    return run_dir, resume_source(cfg, run_dir, existed, print if dist.is_main() else (lambda *_: None))


def check_weights_fit(cfg: RunConfig, loaded: ckpt.Loaded, ident: dict, model: torch.nn.Module) -> None:
    """The checkpoint's tensors fit this run's model. Under the checkpoint's own identity a misfit is the checkpoint's
    fault (exit 4, one line); under another one (train.allow_resume_mismatch) it is the config's: the changed option
    (model.attention_sinks dropped: no sink logits to load) is named, and the checkpoint is not called damaged."""
    problems = state_problems(model.state_dict(), loaded.model)
    if not problems:
        return
    diffs = identity_diffs(loaded.meta.get("identity", {}), ident)
    if not diffs:
        check_state_matches(model.state_dict(), loaded.model, loaded.path / "model.pt")
    raise ConfigError(f"cannot resume from {loaded.path} under train.allow_resume_mismatch=true: this run's "
                      f"{diffs} give a model whose tensors differ from the checkpoint's ({problems}); the override "
                      "continues only changes that keep every tensor, so put those settings back, or start a new run "
                      "(train.run_name=NAME) without resuming")


def _check_loaded(cfg: RunConfig, loaded: ckpt.Loaded, plan: Plan, ident: dict, content: dict[str, str],
                  model: torch.nn.Module) -> None:
    """The checkpoint continues this run: exit 4 (its files disagree) or 2 (this run's config differs)."""
    check_checkpoint_config(loaded)  # its config.yaml, meta.json and step agree: exit 4 naming the field
    check_resume_compatible(cfg, loaded, ident)
    check_data_content(cfg, loaded, content)  # the same shard bytes the checkpoint was trained on
    check_drop_consistent(loaded, plan.drop_pe_tokens)  # DroPE: a dropped PE is not put back
    check_weights_fit(cfg, loaded, ident, model)
