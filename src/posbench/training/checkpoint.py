"""Atomic checkpoints: `run_dir/step_<N>/` with

    model.pt       full model state dict (tensors only: loadable with weights_only=True)
    optim.pt       full optimizer state dict keyed by parameter name
    rng_rank<r>.pt each rank's RNG states (torch CPU/CUDA as tensors, python/numpy as lists)
    config.yaml    the resolved run config, without one command's fields (meta.run_config_yaml)
    meta.json      step (also the data cursor), tokens, schedule, kind, parent, wandb id; written last

Everything is written into `run_dir/.tmp_step_<N>/` (each tensor file fsynced), renamed into place
(then the run dir fsynced), then the `latest` symlink is swapped atomically: a crash or kill at any
moment leaves the previous checkpoint loadable, and a directory counts only once its rename happened.
Re-saving an existing step moves the old copy aside (`.old_step_<N>`) and deletes it only after the
new one is in place; a start after a crash in between restores it. Stale temp dirs are removed on
the next start. A failed write (disk full inside torch.save included) is agreed on by every rank,
each removes its part, and all raise CheckpointError (DiskFullError for ENOSPC: exit code 5).

Every file is created O_EXCL|O_NOFOLLOW inside the fresh temp dir, and a link planted at a step dir, a temp
dir or `latest` is replaced or unlinked, never followed (fileio's module doc): writes never leave the run dir.
A run dir copied with links dereferenced (`cp -rL`) has real directories for `latest` and `best`: at start
`repair_links` turns each back into a link to the step its meta.json names (the copy becomes that step dir when
it is missing); readers resolve one through `link_target`, which says which step it read.

A `best` symlink (train.keep_best) points to the checkpoint with the lowest validation loss so far;
pruning never removes its target. Pruning keeps the newest `keep_last` *valid* periodic checkpoints by
step (superseded `best` ones count as periodic); one whose meta.json is unreadable is moved to
`.quarantine_step_<N>` with a warning instead of crashing every later save.
"""

from __future__ import annotations

import errno
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from posbench import faults
from posbench.errors import CheckpointError, DiskFullError
from posbench.fileio import fsync_dir, open_new, remove_tree
from posbench.training import distributed as dist
from posbench.training.checkpoint_check import check_meta_fields, check_optimizer_step
from posbench.training.checkpoint_read import (
    PICK_ANOTHER,
    read_config_file,
    read_meta_file,
    read_state_dict,
    read_tensors,
)

FILES = ("model.pt", "optim.pt", "config.yaml", "meta.json")
KEPT_KINDS = ("branch", "final")  # never pruned


@dataclass
class Loaded:
    path: Path
    model: dict
    optim: dict
    meta: dict
    rng: dict | None
    config: dict | None = None  # its config.yaml as read (resume.check_checkpoint_config builds it)


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / f"step_{step:08d}"


def _fsync_write(path: Path, data: bytes) -> None:
    with open_new(path) as f:
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


def _is_disk_full(e: BaseException) -> bool:
    # torch.save reports a failed write as RuntimeError ("file write failed"), the errno only in the
    # chained OSError or the text: look at both.
    while e is not None:
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return True
        if "No space left on device" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def _save_tensors(obj, path: Path, step: int) -> None:
    with open_new(path) as f:
        torch.save(obj, faults.inject("full_disk", str(step), f))
        f.flush()
        os.fsync(f.fileno())


def save(run_dir: Path, step: int, model_state: dict, optim_state: dict, meta: dict, config_yaml: str) -> Path:
    """Collective: every rank calls it (each writes its RNG state); rank 0 writes the rest."""
    tmp = run_dir / f".tmp_step_{step:08d}"
    final = step_dir(run_dir, step)
    old = run_dir / f".old_step_{step:08d}"
    failure: BaseException | None = None
    try:
        if dist.is_main():
            remove_tree(tmp)
            tmp.mkdir(parents=True)
        dist.barrier()
        _save_tensors(rng_state(), tmp / f"rng_rank{dist.rank()}.pt", step)
    except (OSError, RuntimeError) as e:
        failure = e
    if not dist.any_rank(failure is not None, dist.collective_device()) and dist.is_main():
        try:
            _save_tensors(model_state, tmp / "model.pt", step)
            faults.inject("crash_during_save", str(step))  # dies here, half a checkpoint on disk
            _save_tensors(optim_state, tmp / "optim.pt", step)
            _fsync_write(tmp / "config.yaml", config_yaml.encode())
            _fsync_write(tmp / "meta.json", json.dumps(meta, indent=1, sort_keys=True).encode())
            if os.path.lexists(final):  # a re-run reached the same step (or a link sits there): keep the old
                remove_tree(old)          # copy until the new one is in; a link is moved aside, then unlinked
                os.replace(final, old)
            os.replace(tmp, final)
            fsync_dir(run_dir)
            _point_latest(run_dir, final)
            remove_tree(old)
        except (OSError, RuntimeError) as e:
            failure = e
    # Every rank learns whether any rank failed, removes what it wrote, and raises the same way.
    if dist.any_rank(failure is not None, dist.collective_device()):
        if dist.is_main():
            remove_tree(tmp)
            if os.path.lexists(old) and not os.path.lexists(final):
                os.replace(old, final)
        full = failure is not None and _is_disk_full(failure)
        what = "disk full" if full else f"{failure.__class__.__name__}: {failure}" if failure else "another rank failed"
        previous = latest_path(run_dir)
        error = DiskFullError if full else CheckpointError
        raise error(f"could not write checkpoint {final} ({what}); the previous checkpoint "
                    f"{previous or '(none)'} is intact. Free space or move train.out_dir.") from failure
    dist.barrier()
    return final


def _point_latest(run_dir: Path, target: Path) -> None:
    point_link(run_dir, "latest", target)


def point_link(run_dir: Path, name: str, target: Path) -> None:
    """Swap the symlink `run_dir/name` to `target` atomically (rank 0 only): `latest`, `best`. A real directory
    in its place (a copy left by `cp -rL` that `repair_links` did not see) is moved aside and removed after."""
    if not dist.is_main():
        return
    link = run_dir / name
    tmp_link = run_dir / f".{name}.tmp"
    if os.path.lexists(tmp_link):
        remove_tree(tmp_link)
    os.symlink(target.name, tmp_link)
    aside = None
    if link.is_dir() and not link.is_symlink():  # rename cannot replace a directory with a link
        aside = run_dir / f".{name}.copy"
        remove_tree(aside)
        os.replace(link, aside)
    os.replace(tmp_link, link)
    if aside is not None:
        remove_tree(aside)


def _same_checkpoint(a: Path, b: Path) -> bool:
    """Whether two step directories hold the same checkpoint: the same meta.json (step, tokens, RNG, cursor) and
    the same file names and sizes."""
    try:
        if (a / "meta.json").read_bytes() != (b / "meta.json").read_bytes():
            return False
        return ({p.name: p.stat().st_size for p in a.iterdir()} == {p.name: p.stat().st_size for p in b.iterdir()})
    except OSError:
        return False


def link_target(link: Path) -> tuple[Path, str | None]:
    """The step directory `run/latest` (or `best`) means, and a note when that is not simply a link's target.

    A link: its target (note None). A real directory (the run dir was copied with links dereferenced, `cp -rL`):
    a copy of the step its meta.json names, so that step's directory when it holds the same checkpoint, else the
    copy itself; the note says which was read, and names a newer checkpoint than the copy when there is one."""
    if link.is_symlink() or not link.is_dir():
        return link.resolve(), None
    run_dir = link.parent
    meta = read_meta(link)
    what = f"{link} is a directory, not a link (the run dir was copied with links dereferenced, e.g. `cp -rL`)"
    if meta is None:
        return link, f"{what}, and its meta.json is unreadable: reading the copy as it is"
    step = step_dir(run_dir, meta["step"])
    newest = latest_path(run_dir)
    newer = (f"; the run has a newer checkpoint, {newest.name}: pass it, or resume the run once to relink "
             "`latest`") if link.name == "latest" and newest is not None and newest.name > step.name else ""
    if step.is_dir() and not step.is_symlink() and _same_checkpoint(step, link):
        return step, f"{what}: a copy of step {meta['step']}; reading {step}{newer}"
    return link, f"{what}: a copy of step {meta['step']}, which is not in the run; reading the copy{newer}"


def repair_links(run_dir: Path, log=print) -> None:
    """At the start of a run (rank 0, holding the run's lock, before any training): a `latest` or `best` that is
    a real directory (a `cp -rL` copy of the run dir) becomes a link again, to the step its meta.json names. The
    copy is removed when that step dir holds the same checkpoint, becomes the step dir when it is missing, and
    is kept aside (`.copied_<name>`) when it differs or is unreadable; every case is logged."""
    if not dist.is_main():
        return
    for name in ("latest", "best"):
        link = run_dir / name
        if link.is_symlink() or not link.is_dir():
            continue
        meta = read_meta(link)
        target = step_dir(run_dir, meta["step"]) if meta else None
        if target is not None and not os.path.lexists(target):
            os.replace(link, target)  # the copy is that checkpoint
            done = f"moved it to {target.name} (that step was missing)"
        else:
            aside = run_dir / f".copied_{name}"
            remove_tree(aside)
            os.replace(link, aside)
            if target is not None and _same_checkpoint(target, aside):
                remove_tree(aside)
                done = f"removed it (an identical copy of {target.name})"
            else:
                why = "its meta.json is unreadable" if target is None else f"it differs from {target.name}"
                done = f"kept it as {aside} ({why})"
                target = latest_path(run_dir) if name == "latest" else None
        fsync_dir(run_dir)
        if target is not None:
            point_link(run_dir, name, target)
        log(f"note: {link} was a directory, not a link (the run dir was copied with links dereferenced, e.g. "
            f"`cp -rL`); {done}" + (f"; {name} now links to {target.name}" if target is not None else ""))


def cleanup_partial(run_dir: Path) -> list[Path]:
    """Remove temp dirs left by a crash during a save; returns what was removed."""
    removed = []
    if dist.is_main() and run_dir.is_dir():
        for p in run_dir.glob(".tmp_step_*"):
            remove_tree(p)
            removed.append(p)
        for p in run_dir.glob(".old_step_*"):  # killed between moving it aside and the new one landing
            final = run_dir / p.name.removeprefix(".old_")
            if os.path.lexists(final) or p.is_symlink():
                remove_tree(p)
            else:
                os.replace(p, final)
    return removed


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first (a link named step_* is not one of ours: never read, never pruned)."""
    if not run_dir.is_dir():
        return []
    return sorted(p for p in run_dir.glob("step_*")
                  if p.is_dir() and not p.is_symlink() and (p / "meta.json").is_file())


def latest_path(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load(path: Path, rank: int = 0) -> Loaded:
    path = Path(path)
    if path.is_symlink() or path.name in ("latest", "best"):
        path, note = link_target(path)
        if note:
            print(f"note: {note}")
    missing = [f for f in FILES if not (path / f).is_file()]
    if missing:
        raise CheckpointError(f"checkpoint {path} is incomplete: missing {', '.join(missing)}")
    meta = read_meta_file(path)
    if not all(isinstance(meta.get(k), int) for k in ("step", "tokens")):
        raise CheckpointError(f"{path / 'meta.json'}: no integer `step` and `tokens`; not a training checkpoint. "
                              f"{PICK_ANOTHER}")
    check_meta_fields(meta, path)  # the step is the data cursor: one its directory and optimizer agree with
    config = read_config_file(path)
    model = read_state_dict(path / "model.pt")
    optim = read_tensors(path / "optim.pt", what="optimizer state")
    check_optimizer_step(optim, meta, path)
    rng_file = path / f"rng_rank{rank}.pt"
    rng = read_tensors(rng_file, what="RNG state") if rng_file.is_file() else None
    return Loaded(path, model, optim, meta, rng, config)


def load_latest_valid(run_dir: Path, rank: int = 0, log=print) -> Loaded | None:
    """The newest checkpoint that loads; a corrupt one is reported and the previous one used.
    None when there is none at all; CheckpointError when there are some but none loads."""
    found = list_checkpoints(run_dir)
    for path in reversed(found):
        try:
            return load(path, rank)
        except CheckpointError as e:
            log(f"warning: {e}; falling back to the previous checkpoint")
    if found:
        raise CheckpointError(f"--resume auto: all {len(found)} checkpoints in {run_dir} are corrupt or "
                              "unreadable; restore one, or start afresh with another train.run_name")
    return None


def read_meta(path: Path) -> dict | None:
    """A checkpoint's meta.json, or None when it is missing, damaged, too large or has no integer step."""
    try:
        meta = read_meta_file(path)
    except CheckpointError:
        return None
    return meta if isinstance(meta.get("step"), int) else None


def prune(run_dir: Path, keep_last: int, log=print) -> None:
    """Keep the newest `keep_last` valid periodic checkpoints (by step); quarantine unreadable ones."""
    if not dist.is_main():
        return
    periodic = []
    best = run_dir / "best"
    best_target = best.resolve() if best.is_symlink() else None
    for p in list_checkpoints(run_dir):
        if best_target is not None and p.resolve() == best_target:
            continue
        meta = read_meta(p)
        if meta is None:
            aside = run_dir / f".quarantine_{p.name}"
            remove_tree(aside)
            os.replace(p, aside)
            log(f"warning: {p}/meta.json is unreadable; moved the checkpoint to {aside} (not counted, not loaded)")
        elif meta.get("kind") not in KEPT_KINDS:
            periodic.append((meta["step"], p))
    for _, p in sorted(periodic)[:-keep_last]:
        remove_tree(p)
