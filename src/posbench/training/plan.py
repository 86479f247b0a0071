"""Batch arithmetic, budgets and the schedule of a run, decided once before the first step; fails with a
clear message (a global batch that does not split over the ranks, a budget below one step) before any work."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from posbench.config import RunConfig
from posbench.errors import ConfigError
from posbench.model.flops import ModelStats, model_stats
from posbench.model.loss import auto_chunk_tokens
from posbench.training.rundir import format_tokens
from posbench.training.schedule import WSD, drop_pe_tokens, make_schedule


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
    # tokens seen after which the PE switches (DroPE's pe.drop_at, RePo's pe.rope_until: PEConfig.drop_share)
    drop_pe_tokens: int | None = None


# under train.compile, the most chunks a micro-batch's fused loss is cut into (see loss_chunk_tokens)
COMPILED_MAX_CHUNKS = 4


def loss_chunk_tokens(cfg: RunConfig) -> int:
    """Tokens per chunk of the run's fused head + loss, 0 for the plain loss: `train.loss` and
    `train.loss_chunk_tokens` (`model.loss.auto_chunk_tokens`), and under `train.compile` at least a quarter of a
    micro-batch's tokens. Dynamo unrolls the loss's loop over chunks: on an H100, tiny's 32 x 1,024 tokens in 64
    chunks of 512 compiled in 144 s, in 4 chunks of 8,192 in 23-33 s (`gpu_check kernels`); the (C, V) fp32 block
    is then 2 GiB at V 65,536. Uncompiled runs keep the configured chunk."""
    chunk = auto_chunk_tokens(cfg.model.vocab_size, cfg.train.loss, cfg.train.loss_chunk_tokens)
    if chunk and cfg.train.compile:
        chunk = max(chunk, math.ceil(cfg.train.micro_batch * cfg.model.seq_len / COMPILED_MAX_CHUNKS))
    return chunk


def budget_tokens(cfg: RunConfig, value: float, n_params: int) -> int:
    return int(value * n_params) if cfg.train.budget_unit == "tokens_per_param" else int(value)


def accum_steps(cfg: RunConfig, world: int) -> int:
    """Micro-batches per step; the batch arithmetic is checked here, before a model is built."""
    t = cfg.train
    seq = cfg.model.seq_len
    per_micro = t.micro_batch * seq
    if t.global_batch_tokens % (per_micro * world):
        raise ConfigError(
            f"train.global_batch_tokens={t.global_batch_tokens:,} is not divisible by micro_batch x seq_len x "
            f"world size = {t.micro_batch} x {seq} x {world} = {per_micro * world:,}; pick a multiple "
            f"(e.g. {per_micro * world * max(1, t.global_batch_tokens // (per_micro * world)):,})")
    return t.global_batch_tokens // (per_micro * world)


def make_plan(cfg: RunConfig, world: int, device_type: str, stats: ModelStats | None = None) -> Plan:
    """`stats`: the run's own model's (training/loop.py builds the model once, before the plan); without
    them (sweep planning, before any run) they come from the config on the meta device."""
    t = cfg.train
    accum = accum_steps(cfg, world)
    if stats is None:
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
    drop = drop_pe_tokens(cfg.pe.drop_share(), schedule.budget_tokens)
    check_drop_happens(cfg, drop, schedule.budget_tokens)
    return Plan(device_type, world, accum, n, stats.flops_per_token_train, budgets, schedule, branch_points,
                schedule.budget_tokens, drop)


def check_drop_happens(cfg: RunConfig, drop: int | None, end_tokens: int) -> None:
    """ConfigError when the PE's switch point (DroPE's drop) falls after the last step's start: the loop switches
    the PE before a step (training/loop.py), so such a run would train RoPE to the end, record `dropped: false` and
    still be reported as DroPE (or as two-stage RePo). Named with the last step at which the switch can happen."""
    gbt = cfg.train.global_batch_tokens
    last_start = (end_tokens - 1) // gbt * gbt  # tokens seen when the last step begins
    if drop is None or drop <= last_start:
        return
    step = last_start // gbt + 1
    setting = cfg.pe.switch_setting
    raise ConfigError(f"{setting}={cfg.pe.drop_share()} switches the PE at {drop:,} tokens, but the run's last step "
                      f"starts at {last_start:,} tokens (step {step} of {end_tokens:,} tokens at {gbt:,} a step): the "
                      f"PE would never switch; the last step at which the switch can happen is step {step}, so give "
                      f"{setting} <= {last_start / end_tokens:.4g}, or a longer budget")


def describe(cfg: RunConfig, plan: Plan, run_dir: Path) -> str:
    drop = "" if plan.drop_pe_tokens is None else f" | switches the PE at {format_tokens(plan.drop_pe_tokens)} tokens"
    return (f"run {run_dir} | {cfg.model.size} {cfg.pe.name} | {plan.n_params:,} params | world {plan.world} x "
            f"micro {cfg.train.micro_batch} x accum {plan.accum} x seq {cfg.model.seq_len} = "
            f"{cfg.train.global_batch_tokens:,} tokens/step | budgets "
            f"{', '.join(format_tokens(b) for b in plan.budgets)} | to {format_tokens(plan.end_tokens)} tokens"
            + drop)
