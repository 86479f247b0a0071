"""Atomic checkpoints: `run_dir/step_<N>/` with

    model.pt       full model state dict (tensors only: loadable with weights_only=True)
    optim.pt       full optimizer state dict keyed by parameter name
    rng_rank<r>.pt each rank's RNG states (torch CPU/CUDA as tensors, python/numpy as lists)
    config.yaml    the resolved run config
    meta.json      step, tokens, data cursor, schedule, kind, parent, wandb id; written last

Everything is written into `run_dir/.tmp_step_<N>/` and renamed into place, then the `latest`
symlink is swapped atomically: a crash or kill at any moment leaves the previous checkpoint loadable,
and a directory counts only once its rename happened. Stale temp dirs are removed on the next start.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from posbench.training import distributed as dist

FILES = ("model.pt", "optim.pt", "config.yaml", "meta.json")
KEPT_KINDS = ("branch", "final")  # never pruned


class CheckpointError(RuntimeError):
    pass


@dataclass
class Loaded:
    path: Path
    model: dict
    optim: dict
    meta: dict
    rng: dict | None


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / f"step_{step:08d}"


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1]),
             "python_version": random.getstate()[0], "python_gauss": random.getstate()[2],
             "numpy": np.random.get_state()[1].tolist(), "numpy_pos": int(np.random.get_state()[2])}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((state["python_version"], tuple(state["python"]), state["python_gauss"]))
    np.random.set_state(("MT19937", np.array(state["numpy"], dtype=np.uint32), state["numpy_pos"], 0, 0.0))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save(run_dir: Path, step: int, model_state: dict, optim_state: dict, meta: dict, config_yaml: str) -> Path:
    """Collective: every rank calls it (each writes its RNG state); rank 0 writes the rest."""
    tmp = run_dir / f".tmp_step_{step:08d}"
    final = step_dir(run_dir, step)
    try:
        if dist.is_main():
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        dist.barrier()
        torch.save(rng_state(), tmp / f"rng_rank{dist.rank()}.pt")
        dist.barrier()
        if dist.is_main():
            torch.save(model_state, tmp / "model.pt")
            _maybe_crash_for_test(step)
            torch.save(optim_state, tmp / "optim.pt")
            _fsync_write(tmp / "config.yaml", config_yaml.encode())
            _fsync_write(tmp / "meta.json", json.dumps(meta, indent=1, sort_keys=True).encode())
            if final.exists():  # a re-run reached the same step: the new copy replaces it
                shutil.rmtree(final)
            os.replace(tmp, final)
            _point_latest(run_dir, final)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        what = "disk full" if e.errno == errno.ENOSPC else f"{e.__class__.__name__}: {e}"
        previous = latest_path(run_dir)
        raise CheckpointError(f"could not write checkpoint {final} ({what}); the previous checkpoint "
                              f"{previous or '(none)'} is intact. Free space or move train.out_dir.") from e
    dist.barrier()
    return final


def _maybe_crash_for_test(step: int) -> None:
    # Fault injection for the crash-during-save test: die with half a checkpoint on disk.
    if os.environ.get("POSBENCH_CRASH_DURING_SAVE") == str(step):
        os._exit(17)


def _point_latest(run_dir: Path, target: Path) -> None:
    link = run_dir / "latest"
    tmp_link = run_dir / ".latest.tmp"
    if tmp_link.is_symlink() or tmp_link.exists():
        tmp_link.unlink()
    os.symlink(target.name, tmp_link)
    os.replace(tmp_link, link)


def cleanup_partial(run_dir: Path) -> list[Path]:
    """Remove temp dirs left by a crash during a save; returns what was removed."""
    removed = []
    if dist.is_main() and run_dir.is_dir():
        for p in run_dir.glob(".tmp_step_*"):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    if not run_dir.is_dir():
        return []
    return sorted(p for p in run_dir.glob("step_*") if p.is_dir() and (p / "meta.json").is_file())


def latest_path(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load(path: Path, rank: int = 0) -> Loaded:
    path = Path(path)
    if path.is_symlink() or path.name == "latest":
        path = path.resolve()
    missing = [f for f in FILES if not (path / f).is_file()]
    if missing:
        raise CheckpointError(f"checkpoint {path} is incomplete: missing {', '.join(missing)}")
    try:
        meta = json.loads((path / "meta.json").read_text())
        model = torch.load(path / "model.pt", map_location="cpu", weights_only=True)
        optim = torch.load(path / "optim.pt", map_location="cpu", weights_only=True)
        rng_file = path / f"rng_rank{rank}.pt"
        rng = torch.load(rng_file, map_location="cpu", weights_only=True) if rng_file.is_file() else None
    except Exception as e:  # truncated or corrupt file: say which checkpoint
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable: {e.__class__.__name__}: {e}") from e
    return Loaded(path, model, optim, meta, rng)


def load_latest_valid(run_dir: Path, rank: int = 0, log=print) -> Loaded | None:
    """The newest checkpoint that loads; a corrupt one is reported and the previous one used."""
    for path in reversed(list_checkpoints(run_dir)):
        try:
            return load(path, rank)
        except CheckpointError as e:
            log(f"warning: {e}; falling back to the previous checkpoint")
    return None


def prune(run_dir: Path, keep_last: int) -> None:
    if not dist.is_main():
        return
    periodic = [p for p in list_checkpoints(run_dir)
                if json.loads((p / "meta.json").read_text()).get("kind") not in KEPT_KINDS]
    for p in periodic[:-keep_last]:
        shutil.rmtree(p, ignore_errors=True)
