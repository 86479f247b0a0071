"""Checkpoint directory -> (RunConfig, Transformer) for evaluation, through training/checkpoint.py's readers
(weights only, YAML within the config loader's limits: a checkpoint received from someone else cannot run
code or exhaust memory; NaN/inf weights refused), so evaluation, export and lm-eval refuse a damaged
checkpoint exactly as resuming does: one line naming the file, exit code 4.

`inspect_checkpoint` checks a checkpoint completely (config, weights readable, every tensor name and
shape matching the model the config describes) without allocating the model, so eval.py can check
every checkpoint it was given before evaluating the first one.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from posbench.config import RunConfig
from posbench.config_loader import from_dict
from posbench.errors import CheckpointError, ConfigError
from posbench.model.build import build_model
from posbench.model.matmul import AUTO, MATMULS
from posbench.model.transformer import Transformer
from posbench.training.checkpoint import latest_path, link_target
from posbench.training.checkpoint_check import check_config_agrees, check_meta_fields
from posbench.training.checkpoint_read import (
    PICK_ANOTHER,
    check_state_matches,
    read_config_file,
    read_meta_file,
    read_state_dict,
)


@dataclass
class LoadedModel:
    path: Path  # the resolved step directory
    cfg: RunConfig
    model: Transformer
    meta: dict


def _vanished(path: str | Path, p: Path) -> CheckpointError:
    """The error for a step directory that is not there: in a run whose training prunes old steps
    (train.keep_last) or is writing this one, say so and name the newest complete one."""
    run_dir = p.parent if p.name.startswith("step_") or p.name in ("latest", "best") else None
    if run_dir is not None and p.name.startswith("step_") and (run_dir / f".tmp_step_{p.name[5:]}").exists():
        return CheckpointError(f"{path}: this checkpoint is being written by a training run; retry in a moment")
    newest = latest_path(run_dir) if run_dir is not None and run_dir.is_dir() else None
    if newest is not None:
        return CheckpointError(f"{path}: no such checkpoint; the run's newest is {newest} (training removes older "
                               "steps as it saves, train.keep_last): pass it, or the run directory")
    return CheckpointError(f"{path}: no such checkpoint (pass a run directory, its `latest`, or a step_N directory)")


def _own_step(link: Path) -> Path:
    """The step directory a run's `latest`/`best` link names, which must be one of that run's own: a link to
    another run's checkpoint would evaluate or export that run under this one's name. A dangling `latest` (its
    step pruned, or the link mid-swap while training saves) falls back to the run's newest complete step."""
    run_dir = link.parent.resolve()
    target = link.resolve()
    if target.parent != run_dir:
        raise CheckpointError(f"{link} points to {target}, outside its run directory {run_dir}: `{link.name}` names "
                              f"a step of its own run. Pass that checkpoint's own step directory if it is meant, "
                              f"or relink `{link.name}`. {PICK_ANOTHER}")
    if not target.exists() and link.name == "latest":
        newest = latest_path(run_dir)
        if newest is None:
            raise _vanished(link, link)
        print(f"note: {link} names {target.name}, which is gone (pruned while training saves); reading the run's "
              f"newest, {newest.name}", file=sys.stderr)
        return newest
    return link


def resolve_checkpoint(path: str | Path) -> Path:
    """A step directory, a `latest` link, or a run directory (its latest checkpoint)."""
    p = Path(path)
    if p.is_dir() and not (p / "model.pt").is_file() and os.path.lexists(p / "latest"):
        p = p / "latest"
    if p.name in ("latest", "best") and p.is_symlink():
        p = _own_step(p)
    if not p.exists():
        raise _vanished(path, p)
    # `latest` copied as a directory (`cp -rL`): the step it is a copy of, and a note saying which was read
    p, note = link_target(p) if p.name in ("latest", "best") else (p.resolve(), None)
    if note:
        print(f"note: {note}", file=sys.stderr)
    if not (p / "model.pt").is_file() or not (p / "config.yaml").is_file():
        raise CheckpointError(f"{path} is not a checkpoint: expected model.pt and config.yaml in it (pass a run "
                              "directory, its `latest`, or a step_N directory)")
    return p


def _build(step_dir: Path, raw: dict) -> RunConfig:
    try:
        return from_dict(RunConfig, raw).resolve(saved=True)
    except ConfigError as e:
        raise CheckpointError(f"{step_dir / 'config.yaml'}: {e}") from None


def _config(step_dir: Path, overrides: dict | None) -> tuple[RunConfig, dict]:
    """(the config to build, with `overrides`; meta.json) after checking config.yaml as written against meta.json
    (training/checkpoint_check.py): an edited PE, packing or architecture is refused, not evaluated."""
    raw = read_config_file(step_dir)  # bounded, like every config; CheckpointError naming the file
    meta = read_meta_file(step_dir) if (step_dir / "meta.json").is_file() else {}
    check_meta_fields(meta, step_dir)
    check_config_agrees(_build(step_dir, raw), meta, step_dir)
    if not overrides:
        return _build(step_dir, raw), meta
    for key, value in overrides.items():
        if not isinstance(raw.get(key, {}), dict):
            raise CheckpointError(f"{step_dir / 'config.yaml'}: `{key}` is not a mapping; the checkpoint is damaged")
        raw[key] = {**raw.get(key, {}), **value}
    return _build(step_dir, raw), meta


def _load_into(model: Transformer, state: dict, step_dir: Path, assign: bool = False) -> None:
    check_state_matches(model.state_dict(), state, step_dir / "model.pt")
    model.load_state_dict(state, assign=assign)


def inspect_checkpoint(path: str | Path, overrides: dict | None = None) -> tuple[Path, RunConfig, Transformer]:
    """(step dir, config, model on the meta device with the checkpoint's shapes); raises CheckpointError."""
    step_dir = resolve_checkpoint(path)
    cfg, _ = _config(step_dir, overrides)  # a damaged or disagreeing meta.json is refused before any evaluation
    state = read_state_dict(step_dir / "model.pt", mmap=True)  # memory-mapped: read in slices, never copied
    with torch.device("meta"):
        model = build_model(cfg.model, cfg.pe, "cpu")
    _load_into(model, {k: v.to("meta") for k, v in state.items()}, step_dir, assign=True)
    return step_dir, cfg, model


def load_model(path: str | Path, device: str | torch.device = "cpu", overrides: dict | None = None) -> LoadedModel:
    """Build the model described by the checkpoint's config.yaml and load its weights.

    `overrides` replaces config sections before building (e.g. {"model": {"attention": "eager"}})."""
    step_dir = resolve_checkpoint(path)
    cfg, meta = _config(step_dir, overrides)
    device = torch.device(device)
    # model.matmul=auto: the library the checkpoint recorded (it trained with it), else measured here
    recorded = meta.get("matmul") if cfg.model.matmul == AUTO and meta.get("matmul") in MATMULS else None
    model = build_model(cfg.model, cfg.pe, device.type, matmul=recorded)
    _load_into(model, read_state_dict(step_dir / "model.pt"), step_dir)
    return LoadedModel(step_dir, cfg, model.to(device).eval(), meta)
