"""Checkpoint directory -> (RunConfig, Transformer) for evaluation, through training/checkpoint.py's readers
(weights only, YAML within the config loader's limits: a checkpoint received from someone else cannot run
code or exhaust memory; NaN/inf weights refused), so evaluation, export and lm-eval refuse a damaged
checkpoint exactly as resuming does: one line naming the file, exit code 4.

`inspect_checkpoint` checks a checkpoint completely (config, weights readable, every tensor name and
shape matching the model the config describes) without allocating the model, so eval.py can check
every checkpoint it was given before evaluating the first one.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from posbench.config import RunConfig
from posbench.config_loader import ConfigError, from_dict
from posbench.model.build import build_model
from posbench.model.transformer import Transformer
from posbench.training.checkpoint import (
    CheckpointError,
    check_state_matches,
    link_target,
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


def resolve_checkpoint(path: str | Path) -> Path:
    """A step directory, a `latest` link, or a run directory (its latest checkpoint)."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"{path}: no such checkpoint (pass a run directory, its `latest`, or a step_N "
                              "directory)")
    if p.is_dir() and not (p / "model.pt").is_file() and (p / "latest").exists():
        p = p / "latest"
    # `latest` copied as a directory (`cp -rL`): the step it is a copy of, and a note saying which was read
    p, note = link_target(p) if p.name in ("latest", "best") else (p.resolve(), None)
    if note:
        print(f"note: {note}", file=sys.stderr)
    if not (p / "model.pt").is_file() or not (p / "config.yaml").is_file():
        raise CheckpointError(f"{path} is not a checkpoint: expected model.pt and config.yaml in it (pass a run "
                              "directory, its `latest`, or a step_N directory)")
    return p


def _config(step_dir: Path, overrides: dict | None) -> RunConfig:
    raw = read_config_file(step_dir)  # bounded, like every config; CheckpointError naming the file
    for key, value in (overrides or {}).items():
        if not isinstance(raw.get(key, {}), dict):
            raise CheckpointError(f"{step_dir / 'config.yaml'}: `{key}` is not a mapping; the checkpoint is damaged")
        raw[key] = {**raw.get(key, {}), **value}
    try:
        return from_dict(RunConfig, raw).resolve()
    except ConfigError as e:
        raise CheckpointError(f"{step_dir / 'config.yaml'}: {e}") from None


def _load_into(model: Transformer, state: dict, step_dir: Path, assign: bool = False) -> None:
    check_state_matches(model.state_dict(), state, step_dir / "model.pt")
    model.load_state_dict(state, assign=assign)


def inspect_checkpoint(path: str | Path, overrides: dict | None = None) -> tuple[Path, RunConfig, Transformer]:
    """(step dir, config, model on the meta device with the checkpoint's shapes); raises CheckpointError."""
    step_dir = resolve_checkpoint(path)
    cfg = _config(step_dir, overrides)
    if (step_dir / "meta.json").is_file():
        read_meta_file(step_dir)  # a damaged one is refused here, before any checkpoint is evaluated
    state = read_state_dict(step_dir / "model.pt", mmap=True)  # memory-mapped: read in slices, never copied
    with torch.device("meta"):
        model = build_model(cfg.model, cfg.pe, "cpu")
    _load_into(model, {k: v.to("meta") for k, v in state.items()}, step_dir, assign=True)
    return step_dir, cfg, model


def load_model(path: str | Path, device: str | torch.device = "cpu", overrides: dict | None = None) -> LoadedModel:
    """Build the model described by the checkpoint's config.yaml and load its weights.

    `overrides` replaces config sections before building (e.g. {"model": {"attention": "eager"}})."""
    step_dir = resolve_checkpoint(path)
    cfg = _config(step_dir, overrides)
    device = torch.device(device)
    model = build_model(cfg.model, cfg.pe, device.type)
    _load_into(model, read_state_dict(step_dir / "model.pt"), step_dir)
    meta = read_meta_file(step_dir) if (step_dir / "meta.json").is_file() else {}
    return LoadedModel(step_dir, cfg, model.to(device).eval(), meta)
