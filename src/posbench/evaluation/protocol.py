"""The "Protocol" section at the top of every study, sweep and eval report: what a reader needs to reproduce a
table, taken from the resolved settings (never retyped): the lengths, the model and its parameter count, the
optimizer and schedule, the task settings, the code version (commit, dirtiness, untracked files) and the machine.
Each report writer calls one function and puts its lines first: eval's here, a study's and a sweep's in
studies/protocol.py, from these parts."""

from __future__ import annotations

import os
import platform
import sys

import torch

from posbench.config import RunConfig
from posbench.config_loader import to_dict
from posbench.training.meta import provenance


def parameter_count(cfg: RunConfig) -> int:
    """Parameters of the model `cfg` builds, counted on the meta device (no memory, no initialisation)."""
    from posbench.model.build import build_model

    with torch.device("meta"):
        # the count does not depend on the linear layers' library: never probe model.matmul=auto for it
        model = build_model(cfg.model, cfg.pe, "cpu", matmul="torch")
    return sum(p.numel() for p in model.parameters())


def model_line(cfg: RunConfig) -> str:
    m = cfg.model
    return (f"`{m.arch.name}`, d_model {m.d_model}, {m.n_layers} layers, {m.n_heads} heads, "
            f"d_ff {m.d_ff}, dropout {m.dropout:g} (attention {m.attn_dropout:g}), vocabulary {m.vocab_size}, "
            f"trained at {m.seq_len} tokens")


def optimizer_line(cfg: RunConfig) -> str:
    o, s = cfg.optim, cfg.schedule
    return (f"AdamW, peak lr {o.lr:g}, betas ({o.beta1:g}, {o.beta2:g}), eps {o.eps:g}, weight decay "
            f"{o.weight_decay:g} (matrices only); warmup-stable-decay schedule: warmup {s.warmup_tokens:,} tokens, "
            f"decay over the last {s.decay_frac:.0%} of the budget ({s.decay}) to {s.min_lr_ratio:g} x peak; "
            f"budget {', '.join(f'{int(b):,}' for b in cfg.train.target_budgets)} {cfg.train.budget_unit}, "
            f"{cfg.train.global_batch_tokens:,} tokens per step")


def code_line() -> str:
    prov = provenance()
    git = prov["git"]
    if not git:
        version = "an installed posbench (no git checkout)"
    else:
        version = f"commit {git['commit'][:12]}" + (", dirty" if git["dirty"] else ", clean")
        if git.get("untracked"):
            version += (f" (untracked: {', '.join(git['untracked'])}; sha256 {git['untracked_sha256'][:12]})")
    return f"{version}; Python {prov['python']}, torch {torch.__version__}"


def machine_line(devices: str = "") -> str:
    """The machine the report was written on, and (`devices`) where its runs trained, as the writer knows it."""
    return f"{platform.platform()}, {os.cpu_count()} CPU cores, {sys.platform}" + (f"; {devices}" if devices else "")


def section(items: list[tuple[str, str]]) -> list[str]:
    """The markdown lines of a protocol: a heading, then one bullet per (what, value)."""
    return ["## Protocol", "", *(f"- **{what}**: {value}" for what, value in items), ""]


def task_settings(task_cfg) -> str:
    """Every option of a task config, `name` first: k, symbols, ranges, as the cells used them."""
    fields = {k: v for k, v in to_dict(task_cfg).items() if k != "name"}
    return f"`{task_cfg.name}` " + ", ".join(f"{k} {v}" for k, v in fields.items())


def run_items(cfg: RunConfig, pe_counts: dict[str, int] | None = None) -> list[tuple[str, str]]:
    """The protocol items every trained run has: model, parameters, optimizer and schedule."""
    counts = pe_counts or {cfg.pe.name: parameter_count(cfg)}
    return [("Model", model_line(cfg)),
            ("Parameters", ", ".join(f"{pe} {n:,}" for pe, n in counts.items())),
            ("Optimizer and schedule", optimizer_line(cfg))]


def eval_items(run_cfg: RunConfig, n_params: int, lengths: list[int], device: str, precision: str
               ) -> list[tuple[str, str]]:
    """An evaluation's protocol: the checkpoint's model, parameters, optimizer and schedule, the lengths scored,
    the code and the machine (computed when it runs, stored in results.json under `protocol`)."""
    trained = (f"task `{run_cfg.data.task.name}`'s own rows" if run_cfg.train.stream == "task"
               else f"`{run_cfg.train.stream}` ({run_cfg.data.source.name}, tokenizer {run_cfg.data.tokenizer.tag()})")
    return [*run_items(run_cfg, {run_cfg.pe.name: n_params}),
            ("Data", f"trained on {trained}"),
            ("Lengths", f"trained at {run_cfg.model.seq_len} tokens; evaluated at {', '.join(map(str, lengths))} "
                        "tokens"),
            ("Code", code_line()),
            ("Machine", machine_line(f"evaluated on {device}, {precision}"))]
