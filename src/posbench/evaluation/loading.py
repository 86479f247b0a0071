"""Checkpoint directory -> (RunConfig, Transformer) for evaluation. weights_only loading, YAML via
safe_load: a checkpoint received from someone else cannot run code."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from posbench.config import RunConfig
from posbench.config_loader import ConfigError, from_dict, load_yaml
from posbench.model.transformer import Transformer


@dataclass
class LoadedModel:
    path: Path  # the resolved step directory
    cfg: RunConfig
    model: Transformer
    meta: dict


def resolve_checkpoint(path: str | Path) -> Path:
    """A step directory, a `latest` link, or a run directory (its latest checkpoint)."""
    p = Path(path)
    if p.is_dir() and not (p / "model.pt").is_file() and (p / "latest").exists():
        p = p / "latest"
    p = p.resolve()
    if not (p / "model.pt").is_file() or not (p / "config.yaml").is_file():
        raise ConfigError(f"{path} is not a checkpoint: expected model.pt and config.yaml in it (pass a run "
                          "directory, its `latest`, or a step_N directory)")
    return p


def load_model(path: str | Path, device: str | torch.device = "cpu", overrides: dict | None = None) -> LoadedModel:
    """Build the model described by the checkpoint's config.yaml and load its weights.

    `overrides` replaces config sections before building (e.g. {"model": {"attention": "eager"}})."""
    import json

    step_dir = resolve_checkpoint(path)
    raw = load_yaml(step_dir / "config.yaml")
    for key, value in (overrides or {}).items():
        raw[key] = {**raw.get(key, {}), **value}
    cfg = from_dict(RunConfig, raw).resolve()
    device = torch.device(device)
    model = Transformer(cfg.model, cfg.pe, device.type)
    state = torch.load(step_dir / "model.pt", map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    meta = json.loads((step_dir / "meta.json").read_text()) if (step_dir / "meta.json").is_file() else {}
    return LoadedModel(step_dir, cfg, model.to(device).eval(), meta)
