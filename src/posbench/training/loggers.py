"""One logger interface with null objects instead of scattered `if rank == 0` checks.

Every metric dict carries `tokens` (the x-axis) and `step`. Implementations:
  JsonlLogger   metrics.jsonl in the run directory, always (on rank 0)
  ConsoleLogger one line per log interval
  WandbLogger   online when WANDB_API_KEY (or a sweep agent's WANDB_SWEEP_ID) is set, else offline;
                tokens as the step metric
  NullLogger    for ranks other than 0
`make_logger` picks them for a run (a branch run's WandB curves start with its parent's history). A run
resumed from step N first drops the rows metrics.jsonl holds for steps after N (`drop_rows_after`): the run
logs those steps again, and a reader must find each step once.
No configs or logs ever contain the environment or API keys: WandB reads its key itself.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from posbench.config import RunConfig
from posbench.config_loader import to_dict
from posbench.data.paths import is_inside
from posbench.fileio import open_append, read_text_bounded, write_text
from posbench.training import distributed as dist

METRICS_MAX_BYTES = 1 << 30  # metrics.jsonl is read whole: ~300 bytes a row, so ~3.5 million logged steps


def read_metrics_text(path: Path) -> str:
    """The text of a metrics.jsonl, read without following a link and refused (DataError) past METRICS_MAX_BYTES
    before it is read: a file of one huge line is not read whole."""
    return read_text_bounded(path, METRICS_MAX_BYTES, "a metrics.jsonl")


class Logger:
    run_id: str = ""

    def log(self, metrics: dict) -> None:
        pass

    def message(self, text: str) -> None:
        pass

    def finish(self) -> None:
        pass


class NullLogger(Logger):
    pass


class JsonlLogger(Logger):
    def __init__(self, path: Path):
        self.path = path

    def log(self, metrics):
        with open_append(self.path) as f:  # never through a link planted at metrics.jsonl (LinkError)
            f.write(json.dumps(metrics, sort_keys=True) + "\n")
            f.flush()


class ConsoleLogger(Logger):
    def __init__(self):
        self.said_no_mfu = False

    def log(self, m):
        if "loss" not in m:
            if "val_loss" in m:
                print(f"step {m['step']:>6} | tokens {m['tokens']:.3e} | val loss {m['val_loss']:.4f}", flush=True)
            return
        if "mfu" not in m and not self.said_no_mfu:  # a row without it: no known peak (training/metrics.py)
            print("mfu n/a (no peak for this device)", flush=True)
            self.said_no_mfu = True
        eta = m.get("eta_s", 0)
        util = f"mfu {100 * m['mfu']:.1f}% | " if "mfu" in m else ""
        print(f"step {m['step']:>6} | tokens {m['tokens']:.3e} | loss {m['loss']:.4f} | lr {m['lr']:.2e} | "
              f"grad {m.get('grad_norm', 0):.3f} | {m.get('tokens_per_s', 0):,.0f} tok/s | "
              f"{util}eta {int(eta) // 3600}h{int(eta) % 3600 // 60:02d}m", flush=True)

    def message(self, text):
        print(text, file=sys.stderr, flush=True)


class WandbLogger(Logger):
    def __init__(self, run_dir: Path, name: str, config: dict, mode: str, project: str, entity: str,
                 group: str, run_id: str, history: list[dict] = ()):
        import wandb

        if mode == "auto":
            # a sweep agent's trial must report to the sweep, whatever holds the key (env or netrc)
            mode = "online" if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_SWEEP_ID") else "offline"
        self.wandb = wandb
        self.run = wandb.init(project=project, entity=entity or None, name=name, id=run_id or None,
                              resume="allow", mode=mode, dir=str(run_dir), config=config, group=group or None,
                              settings=wandb.Settings(silent=True, x_disable_stats=True))
        self.run_id = self.run.id
        # tokens, not steps, on the x-axis: runs with different batch sizes line up
        self.run.define_metric("tokens")
        self.run.define_metric("*", step_metric="tokens")
        for row in history:  # a branch carries its parent's curve up to the branch point
            self.run.log(row)

    def log(self, metrics):
        self.run.log(metrics)

    def finish(self):
        self.run.finish()


class MultiLogger(Logger):
    def __init__(self, loggers: list[Logger]):
        self.loggers = loggers
        self.run_id = next((lg.run_id for lg in loggers if lg.run_id), "")

    def log(self, metrics):
        for lg in self.loggers:
            lg.log(metrics)

    def message(self, text):
        for lg in self.loggers:
            lg.message(text)

    def finish(self):
        for lg in self.loggers:
            lg.finish()


def read_history(jsonl: Path, up_to_tokens: int) -> list[dict]:
    if not jsonl.is_file():
        return []
    rows = [json.loads(line) for line in read_metrics_text(jsonl).splitlines() if line.strip()]
    return [r for r in rows if r.get("tokens", 0) <= up_to_tokens]


def _logged_after(line: str, step: int) -> bool:
    """Whether a metrics.jsonl line is a row of a step after `step`; a torn line (a crash mid-write) counts."""
    try:
        row = json.loads(line)
    except ValueError:
        return True
    return not isinstance(row, dict) or not isinstance(row.get("step"), int) or row["step"] > step


def drop_rows_after(jsonl: Path, step: int) -> int:
    """Rewrite metrics.jsonl (atomically) without the rows of steps after `step`; returns how many it dropped."""
    if not jsonl.is_file():
        return 0
    lines = read_metrics_text(jsonl).splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and not _logged_after(line, step)]
    dropped = sum(1 for line in lines if line.strip()) - len(kept)
    if dropped:
        write_text(jsonl, "".join(line if line.endswith("\n") else line + "\n" for line in kept))
    return dropped


def make_logger(cfg: RunConfig, run_dir: Path, run_id: str, parent: dict | None,
                resumed_step: int | None = None) -> Logger:
    """The run's loggers (rank 0); `resumed_step`: this run directory continues from that step's checkpoint."""
    if not dist.is_main():
        return NullLogger()
    dropped = drop_rows_after(run_dir / "metrics.jsonl", resumed_step) if resumed_step is not None else 0
    if dropped:
        print(f"resuming at step {resumed_step}: dropped {dropped} rows of {run_dir / 'metrics.jsonl'} logged after "
              "it (those steps run again)", file=sys.stderr)
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
