"""What a checkpoint records about itself besides the weights: its meta.json (what resuming, branching,
evaluation and reports read; the step is the data cursor, training/batch_sources.py addresses samples by step,
so no other cursor is stored) and its provenance: the git commit of the posbench source (when it runs from a
checkout) and the installed distributions with their versions, so a result can be traced to the exact
software (computed once per process, under `provenance`)."""

from __future__ import annotations

import functools
import hashlib
import math
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from posbench.config import RunConfig
from posbench.config_loader import dump_yaml, to_dict
from posbench.training.plan import Plan
from posbench.training.state import TrainState
from posbench.training.train_config import TrainConfig

SOURCE_DIR = Path(__file__).resolve().parents[1]


def git_commit(where: Path = SOURCE_DIR) -> dict:
    """{"commit": sha, "dirty": bool} of the checkout holding `where`; {} for an installed wheel. Files under
    `where` (the package) that git does not track make it dirty too, and are listed under "untracked" with one
    sha256 over their paths and bytes ("untracked_sha256"): a new PE file trains before anyone commits it, and the
    commit alone would then point at code that lacks it. Untracked files elsewhere in the checkout do not train."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
        modified = bool(git("status", "--porcelain", "--untracked-files=no"))
        top = Path(git("rev-parse", "--show-toplevel"))
        untracked = sorted(git("ls-files", "--others", "--exclude-standard", "--full-name", "--", ".").splitlines())
    except (OSError, subprocess.SubprocessError):
        return {}
    out = {"commit": commit, "dirty": modified or bool(untracked)}
    if untracked:
        digest = hashlib.sha256()
        for name in untracked:
            digest.update(name.encode() + b"\0" + (top / name).read_bytes() + b"\0")
        out.update(untracked=untracked, untracked_sha256=digest.hexdigest())
    return out


def package_versions() -> dict[str, str]:
    """Every installed distribution (name lower-cased) -> version."""
    out = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            out[name.lower()] = dist.version
    return dict(sorted(out.items()))


@functools.cache
def provenance() -> dict:
    return {"git": git_commit(), "python": sys.version.split()[0], "packages": package_versions()}


def meta_json(state: TrainState, plan: Plan, kind: str, ident: dict, tokenizer_fingerprint: str,
              packing: dict | None = None, data_content: dict[str, str] | None = None) -> dict:
    """`state`: the step, tokens, WandB id, branch parent, best validation loss and DroPE's drop
    (`pe_dropped_at_tokens`: the PE was dropped before these weights, at that many tokens; the config.yaml beside
    them has `pe.dropped: true`).
    `packing`: model.packing (mask, positions, bos_id), what a position meant in training's windows.
    `data_content`: each token shard's content fingerprint by file name (BatchSource.content), compared on resume
    (training/resume.py); left out when empty."""
    s = plan.schedule
    dropped = {} if state.recorded_drop is None else {"pe_dropped_at_tokens": state.recorded_drop}
    content = {"data_content": data_content} if data_content else {}
    best = state.best_val if math.isfinite(state.best_val) else None
    return {**dropped, **content,
            "step": state.step, "tokens": state.tokens, "kind": kind,  # the step is the data cursor
            "packing": packing,
            "best_val_loss": best, "provenance": provenance(),
            "identity": ident, "wandb_id": state.run_id, "parent": state.parent,
            "tokenizer_fingerprint": tokenizer_fingerprint,
            "schedule": {"peak_lr": s.peak_lr, "warmup_tokens": s.warmup_tokens, "budget_tokens": s.budget_tokens,
                         "decay_tokens": s.decay_tokens, "decay": s.decay, "min_lr_ratio": s.min_lr_ratio},
            "world_size": plan.world}



def run_config_yaml(cfg: RunConfig) -> str:
    """The config.yaml saved with a checkpoint: the run's settings, without train's invocation fields
    (TrainConfig.INVOCATION), which describe one command and not the run; a reader gets their defaults."""
    saved = to_dict(cfg)
    for name in TrainConfig.INVOCATION:
        saved["train"].pop(name)
    return dump_yaml(saved)
