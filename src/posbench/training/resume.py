"""Stopping and continuing a run. Stopping: SIGTERM/SIGINT only set a flag, so a stop always lands on a step
boundary where every rank saves the same step (a handler that saved or exited itself could tear a checkpoint).
Continuing: from a fresh start, `--resume auto|PATH`, a torchelastic restart, or a branch parent; every rank
loads the checkpoint rank 0 picked, or all stop; the checkpoint's identity must match."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from posbench.config import RunConfig
from posbench.config_loader import from_dict
from posbench.errors import CheckpointError, ConfigError
from posbench.training import checkpoint as ckpt
from posbench.training import distributed as dist
from posbench.training.checkpoint_check import check_config_agrees
from posbench.training.checkpoint_read import PICK_ANOTHER
from posbench.training.rundir import identity_diffs


class StopFlag:
    """SIGTERM/SIGINT set a flag; the loop saves at the next step boundary on all ranks and exits.

    A signal after the last step's check (during the final checkpoint or snapshot) has no step left to stop at:
    `signum` keeps it and train() returns it as `late_signal`, so a caller with more work after the run (a study's
    next cell) stops there instead of dropping the request. A signal ignored when the run starts stays ignored:
    a non-interactive shell starts its background jobs with SIGINT ignored, and the flag must not revive it for
    the run's steps alone (between a study's cells it would still be ignored)."""

    def __init__(self):
        self.signum: int | None = None  # the first stop signal received
        self.previous = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            if signal.getsignal(sig) is not signal.SIG_IGN:
                self.previous[sig] = signal.signal(sig, self._handle)

    @property
    def raised(self) -> bool:
        return self.signum is not None

    def _handle(self, signum, frame):
        if self.signum is None:
            self.signum = signum

    def restore(self):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


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
        except CheckpointError as e:
            error = e
    choice = dist.broadcast_object(choice)
    if not dist.is_main() and choice:
        try:
            loaded = ckpt.load(Path(choice), dist.rank())
        except CheckpointError as e:
            error = e
    if dist.any_rank(error is not None, dist.collective_device()):
        if error is not None and not dist.is_distributed():
            raise error
        if error is not None:
            raise CheckpointError(f"rank {dist.rank()}: {error}; all ranks stop") from error
        raise CheckpointError(f"another rank could not load checkpoint {choice or '(rank 0 found none)'}; "
                                   "all ranks stop")
    return loaded


def check_resume_compatible(cfg: RunConfig, loaded: ckpt.Loaded, ident: dict) -> None:
    diffs = identity_diffs(loaded.meta.get("identity", {}), ident)
    if diffs and not cfg.train.allow_resume_mismatch:
        raise ConfigError(f"cannot resume from {loaded.path}: its {diffs} differ from this run's. "
                          "Fix the config, or pass train.allow_resume_mismatch=true to override")


def check_data_content(cfg: RunConfig, loaded: ckpt.Loaded, content: dict[str, str]) -> None:
    """Each token shard the checkpoint recorded (meta.json `data_content`: file name -> content fingerprint,
    data/shards.py) still holds those bytes. The identity's data fingerprint sees shard names and token counts
    only, so a shard rebuilt from other text with the same count would otherwise resume silently on other data.
    A checkpoint from before the record, or a shard it does not list, is not checked (the identity covers names)."""
    recorded = loaded.meta.get("data_content")
    if recorded is None or cfg.train.allow_resume_mismatch:
        return
    if not isinstance(recorded, dict):
        raise CheckpointError(f"{loaded.path / 'meta.json'}: data_content is not a JSON object. "
                                   f"{PICK_ANOTHER}")
    changed = sorted(name for name, fp in recorded.items() if name in content and content[name] != fp)
    if changed:
        from posbench.data.layout import DataLayout

        where = DataLayout.from_config(cfg.data).tokens_dir / changed[0]
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise ConfigError(f"cannot resume from {loaded.path}: token shard {where}{more} changed since the checkpoint "
                          "was written (same name and token count, other bytes); restore the shard the run was "
                          "trained on (re-tokenize the same inputs with the same tokenizer), or start a new run "
                          "(train.run_name=NAME), or pass train.allow_resume_mismatch=true to override")


def check_checkpoint_config(loaded: ckpt.Loaded) -> None:
    """The checkpoint's own config.yaml describes the run its meta.json records (training/checkpoint_check.py):
    a resume continues from weights whose PE, packing and architecture are what the checkpoint says they are."""
    if loaded.config is None:
        return
    try:
        cfg = from_dict(RunConfig, loaded.config).resolve(saved=True)
    except ConfigError as e:
        raise CheckpointError(f"{loaded.path / 'config.yaml'}: {e}. {PICK_ANOTHER}") from None
    check_config_agrees(cfg, loaded.meta, loaded.path)


def check_drop_consistent(loaded: ckpt.Loaded, drop_pe_tokens: int | None) -> None:
    """A checkpoint whose PE has switched (DroPE's drop, RePo's pe.rope_until) continues only under a schedule that
    has switched it by then: otherwise the run would rotate weights recalibrated as NoPE again (or train RePo's
    networks' model as RoPE). The loop switches it before the first step."""
    tokens = loaded.meta.get("tokens", 0)
    if "pe_dropped_at_tokens" in loaded.meta and (drop_pe_tokens is None or drop_pe_tokens > tokens):
        when = "never" if drop_pe_tokens is None else f"only at {drop_pe_tokens:,} tokens"
        raise ConfigError(f"cannot continue from {loaded.path}: its PE switched at "
                          f"{loaded.meta['pe_dropped_at_tokens']:,} tokens, but this run's schedule switches it "
                          f"{when}; "
                          f"set the PE's switch point (pe.drop_at, pe.rope_until) so it falls at or before {tokens:,} "
                          "tokens of this run's budget")
