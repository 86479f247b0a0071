"""What the loop carries from one step to the next (`TrainState`): the counters, the record a checkpoint's
meta.json keeps of them (training/meta.py reads them from here), and what a resumed or branched run takes over
from the checkpoint it starts from."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from posbench.config import RunConfig
from posbench.training.checkpoint import Loaded


@dataclass
class TrainState:
    step: int = 0  # optimizer steps taken; also the data cursor (training/batch_sources.py)
    tokens: int = 0  # tokens seen: what the schedule, the branch points and DroPE's drop are functions of
    own_run: bool = False  # continues its own run directory's checkpoint (a branch starts a new record)
    run_id: str = ""  # the WandB run id, carried by a resume of the same run directory
    parent: dict | None = None  # the branch parent's checkpoint (meta.json `parent`)
    best_val: float = math.inf  # lowest validation loss so far (train.keep_best), this run directory's
    best_step: int = -1  # the step saved as `best` by this process, so that step is not saved twice
    # tokens at which the PE switched (DroPE's drop, RePo's pe.rope_until), as recorded (the checkpoint's, or this
    # run's own switch)
    dropped_at: int | None = None
    pe_dropped: bool = False  # this process's model has dropped its PE: from then on meta.json records `dropped_at`
    steps_this_run: int = 0  # what train.max_steps counts
    logged_at: float = 0.0  # perf_counter and tokens at the last log row (or the start): a row's tokens_per_s
    logged_tokens: int = 0

    @classmethod
    def start(cls, cfg: RunConfig, loaded: Loaded | None, run_dir: Path) -> TrainState:
        """A fresh run's state, or the one the checkpoint `loaded` records: a resume of this run directory keeps
        its WandB id and best validation loss; a branch (train.branch_from, another directory) starts its own
        record with the checkpoint as its parent."""
        if loaded is None:
            return cls()
        meta = loaded.meta
        own = loaded.path.parent == run_dir
        parent = meta.get("parent")
        if cfg.train.branch_from and not own:
            parent = {"checkpoint": str(loaded.path), "run": loaded.path.parent.name,
                      "run_dir": str(loaded.path.parent), "step": meta["step"], "tokens": meta["tokens"]}
        return cls(step=meta["step"], tokens=meta["tokens"], own_run=own,
                   run_id=meta.get("wandb_id", "") if own else "", parent=parent,
                   best_val=(meta.get("best_val_loss") or math.inf) if own else math.inf,
                   dropped_at=meta.get("pe_dropped_at_tokens"), logged_tokens=meta["tokens"])

    @property
    def recorded_drop(self) -> int | None:
        """meta.json's `pe_dropped_at_tokens` for weights saved now: set once this process has dropped the PE
        (a run resumed past the drop drops it again before its first step)."""
        return self.dropped_at if self.pe_dropped else None

    def summary(self, run_dir: Path, stopped: bool, late_signal: int | None = None) -> dict:
        """What train() returns: where the run is, whether it stopped before its budget (a signal or
        train.max_steps: resume it to finish), and a stop signal that arrived after the last step (resume.StopFlag)."""
        return {"run_dir": str(run_dir), "step": self.step, "tokens": self.tokens, "stopped": stopped,
                "late_signal": late_signal}
