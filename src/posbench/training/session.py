"""Everything decided once before the first step: device, batch arithmetic, budgets and schedule,
run directory, what to resume from, loggers. Fails with a clear message before any work."""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

import torch

from posbench.config import RunConfig
from posbench.config_loader import ConfigError, to_dict
from posbench.data.atomic import DirLock
from posbench.data.errors import DataError
from posbench.data.paths import is_inside
from posbench.model.flops import model_stats
from posbench.training import checkpoint as ckpt
from posbench.training import distributed as dist
from posbench.training.loggers import (
    ConsoleLogger,
    JsonlLogger,
    Logger,
    MultiLogger,
    NullLogger,
    WandbLogger,
    read_history,
)
from posbench.training.provenance import provenance
from posbench.training.rundir import (
    check_run_name,
    claim_run_dir,
    default_name,
    find_run_dir,
    format_tokens,
    read_identity,
)
from posbench.training.schedule import WSD, make_schedule


@dataclass
class Plan:
    device_type: str
    world: int
    accum: int
    n_params: int
    flops_per_token: float
    budgets: list[int]  # tokens, ascending
    schedule: WSD  # the schedule this run follows to its end
    branch_points: dict[int, int] = field(default_factory=dict)  # decay start tokens -> budget tokens
    end_tokens: int = 0


def device_type_for(cfg: RunConfig) -> str:
    requested = cfg.train.device
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device=cuda but no CUDA device is visible")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def budget_tokens(cfg: RunConfig, value: float, n_params: int) -> int:
    return int(value * n_params) if cfg.train.budget_unit == "tokens_per_param" else int(value)


def make_plan(cfg: RunConfig, world: int, device_type: str) -> Plan:
    t = cfg.train
    seq = cfg.model.seq_len
    per_micro = t.micro_batch * seq
    if t.global_batch_tokens % (per_micro * world):
        raise ConfigError(
            f"train.global_batch_tokens={t.global_batch_tokens:,} is not divisible by micro_batch x seq_len x "
            f"world size = {t.micro_batch} x {seq} x {world} = {per_micro * world:,}; pick a multiple "
            f"(e.g. {per_micro * world * max(1, t.global_batch_tokens // (per_micro * world)):,})")
    accum = t.global_batch_tokens // (per_micro * world)
    stats = model_stats(cfg.model, cfg.pe, device_type)
    n = stats.params_total
    budgets = sorted({budget_tokens(cfg, b, n) for b in t.target_budgets})
    for b in budgets:
        if b < t.global_batch_tokens:
            raise ConfigError(f"budget {b:,} tokens is smaller than one step ({t.global_batch_tokens:,} tokens)")
    schedules = {b: make_schedule(cfg.schedule, cfg.optim.lr, b, budgets[0]) for b in budgets}
    if t.branch_from:
        target = budget_tokens(cfg, t.budget, n)
        if target not in schedules:
            schedules[target] = make_schedule(cfg.schedule, cfg.optim.lr, target, budgets[0])
        schedule = schedules[target]
        branch_points = {}
    else:
        schedule = schedules[budgets[-1]]
        branch_points = {schedules[b].decay_start: b for b in budgets[:-1]}
    return Plan(device_type, world, accum, n, stats.flops_per_token_train, budgets, schedule, branch_points,
                schedule.budget_tokens)


def identity(cfg: RunConfig, data_fingerprint: str) -> dict:
    """What a run directory (and a resume) must agree on."""
    return {"model": to_dict(cfg.model), "pe": to_dict(cfg.pe), "data": data_fingerprint, "seed": cfg.seed}


def choose_run_dir(cfg: RunConfig, plan: Plan, ident: dict) -> tuple[Path, bool]:
    name = cfg.train.run_name or default_name(cfg.model.size, cfg.pe.name, plan.end_tokens, cfg.seed)
    check_run_name(name)
    out = Path(cfg.train.out_dir)
    if dist.is_main():
        run_dir, existed = find_run_dir(out, name, ident)
        if cfg.train.resume == "auto" and not existed and not cfg.train.allow_resume_mismatch:
            refuse_changed_identity(out / name, ident)
        claim_run_dir(run_dir, ident)
    else:
        run_dir, existed = None, False
    shared = [str(run_dir) if run_dir else "", existed]
    if dist.is_distributed():
        torch.distributed.broadcast_object_list(shared, src=0)
    return Path(shared[0]), bool(shared[1])


def lock_run_dir(run_dir: Path, held: contextlib.ExitStack) -> None:
    """Rank 0 holds `run_dir/.lock` until `held` closes; a second run of the same directory stops
    at once (every rank), naming the holder's pid and host, instead of interleaving metrics and
    overwriting checkpoints."""
    error = None
    if dist.is_main():
        try:
            held.enter_context(DirLock(run_dir, "training"))
        except DataError as e:
            error = e
    if dist.any_rank(error is not None, dist.collective_device()):
        raise error or DataError(f"rank 0 could not lock {run_dir}; all ranks stop")


def resume_source(cfg: RunConfig, run_dir: Path, existed: bool, log) -> ckpt.Loaded | None:
    """The checkpoint to continue from, or None for a fresh start."""
    # Multi-node: only the agent whose worker failed counts a restart; the healthy nodes re-rendezvous
    # with a count of 0, so every rank takes the largest count (else they would refuse the existing run).
    restarted = dist.any_rank(int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0, dist.collective_device())
    mode = cfg.train.resume or ("auto" if restarted else "")
    if cfg.train.branch_from:
        path = Path(cfg.train.branch_from)
        if not path.exists():
            raise ConfigError(f"train.branch_from: {path} does not exist")
        if mode == "auto" and ckpt.latest_path(run_dir):  # a restarted branch run continues itself
            return agreed_load(lambda: ckpt.load_latest_valid(run_dir, 0, log))
        return agreed_load(lambda: ckpt.load(path, 0))
    if mode == "auto":
        return agreed_load(lambda: ckpt.load_latest_valid(run_dir, 0, log))
    if mode:
        path = Path(mode)
        if not path.exists():
            raise ConfigError(f"train.resume: checkpoint {path} does not exist (use `auto` for the latest)")
        return agreed_load(lambda: ckpt.load(path, 0))
    if existed and ckpt.latest_path(run_dir):
        raise ConfigError(f"{run_dir} already holds checkpoints of this configuration; continue it with "
                          "`--resume auto`, or start another with train.run_name=NAME")
    return None


def agreed_load(decide) -> ckpt.Loaded | None:
    """Rank 0 decides which checkpoint (`decide()`), broadcasts it, every other rank loads that same
    one; if any rank cannot, all stop with CheckpointError. Ranks choosing on their own could resume
    different steps when one rank's files are damaged, and train together on different weights."""
    loaded, error, choice = None, None, None
    if dist.is_main():
        try:
            loaded = decide()
            choice = str(loaded.path) if loaded else ""
        except ckpt.CheckpointError as e:
            error = e
    choice = dist.broadcast_object(choice)
    if not dist.is_main() and choice:
        try:
            loaded = ckpt.load(Path(choice), dist.rank())
        except ckpt.CheckpointError as e:
            error = e
    if dist.any_rank(error is not None, dist.collective_device()):
        if error is not None:
            raise ckpt.CheckpointError(f"rank {dist.rank()}: {error}; all ranks stop") from error
        raise ckpt.CheckpointError(f"another rank could not load checkpoint {choice or '(rank 0 found none)'}; "
                                   "all ranks stop")
    return loaded


def identity_diffs(saved: dict, ident: dict) -> str:
    """'model, data (checkpoint: X, this run: Y)': which parts differ, with both data fingerprints, since a
    different tokenizer or task mix is the usual cause and the fingerprint names which."""
    diffs = [k for k in ("model", "pe", "data", "seed") if saved.get(k) != ident[k]]
    return ", ".join(f"data (checkpoint: {saved.get('data')}, this run: {ident['data']})" if k == "data" else k
                     for k in diffs)


def refuse_changed_identity(named_dir: Path, ident: dict) -> None:
    """`--resume auto` where the run's directory belongs to another configuration: refuse, rather than
    silently start a fresh `_v2` run that the user believes is a continuation."""
    ident_file = named_dir / "identity.json"
    if ident_file.is_file():
        diffs = identity_diffs(read_identity(ident_file), ident)
        raise ConfigError(f"--resume auto: {named_dir} was trained with another configuration; its {diffs} "
                          "differ from this run's. Fix the config (e.g. the same data.tokenizer and data.mix "
                          "as its shards), or pass train.allow_resume_mismatch=true to override")


def check_resume_compatible(cfg: RunConfig, loaded: ckpt.Loaded, ident: dict) -> None:
    diffs = identity_diffs(loaded.meta.get("identity", {}), ident)
    if diffs and not cfg.train.allow_resume_mismatch:
        raise ConfigError(f"cannot resume from {loaded.path}: its {diffs} differ from this run's. "
                          "Fix the config, or pass train.allow_resume_mismatch=true to override")


def make_logger(cfg: RunConfig, run_dir: Path, run_id: str, parent: dict | None) -> Logger:
    if not dist.is_main():
        return NullLogger()
    loggers: list[Logger] = [JsonlLogger(run_dir / "metrics.jsonl"), ConsoleLogger()]
    if cfg.logging.wandb != "disabled":
        history, group = [], cfg.logging.group
        if parent:
            group = group or parent["run"]
            history = parent_history(parent, cfg.train.out_dir)
        loggers.append(WandbLogger(run_dir, run_dir.name, to_dict(cfg), cfg.logging.wandb, cfg.logging.project,
                                   cfg.logging.entity, group, run_id, history))
    return MultiLogger(loggers)


def parent_history(parent: dict, out_dir: str) -> list[dict]:
    """The branch parent's metrics up to the branch point, for the new run's curves. Its run_dir comes
    from a checkpoint's meta.json, which may have been made elsewhere: it is read only when it lies in
    this run's out_dir (where branch parents live), else the curves start at the branch."""
    run_dir = Path(str(parent.get("run_dir", "")))
    if not parent.get("run_dir") or not is_inside(run_dir, out_dir):
        print(f"warning: the branch parent's run dir {str(run_dir)!r} (from its checkpoint's meta.json) is not "
              f"inside train.out_dir={out_dir}; its metrics are not copied into this run's curves")
        return []
    return read_history(run_dir / "metrics.jsonl", parent["tokens"])


class StopFlag:
    """SIGTERM/SIGINT set a flag; the loop saves at the next step boundary on all ranks and exits."""

    def __init__(self):
        self.raised = False
        self.previous = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.raised = True

    def restore(self):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def describe(cfg: RunConfig, plan: Plan, run_dir: Path) -> str:
    return (f"run {run_dir} | {cfg.model.size} {cfg.pe.name} | {plan.n_params:,} params | world {plan.world} x "
            f"micro {cfg.train.micro_batch} x accum {plan.accum} x seq {cfg.model.seq_len} = "
            f"{cfg.train.global_batch_tokens:,} tokens/step | budgets "
            f"{', '.join(format_tokens(b) for b in plan.budgets)} | to {format_tokens(plan.end_tokens)} tokens")


def meta_json(step: int, tokens: int, plan: Plan, kind: str, ident: dict, run_id: str, parent: dict | None,
              tokenizer_fingerprint: str, best_val_loss: float | None = None) -> dict:
    s = plan.schedule
    return {"step": step, "tokens": tokens, "kind": kind,  # the step is the data cursor (training/sources.py)
            "best_val_loss": best_val_loss, "provenance": provenance(),
            "identity": ident, "wandb_id": run_id, "parent": parent, "tokenizer_fingerprint": tokenizer_fingerprint,
            "schedule": {"peak_lr": s.peak_lr, "warmup_tokens": s.warmup_tokens, "budget_tokens": s.budget_tokens,
                         "decay_tokens": s.decay_tokens, "decay": s.decay, "min_lr_ratio": s.min_lr_ratio},
            "world_size": plan.world}
