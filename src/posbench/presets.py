"""Where presets live (configs/<kind>/<name>.yaml) and which exist: light enough for a command's `--help`."""

from __future__ import annotations

from pathlib import Path

from posbench.config_loader import nearest
from posbench.errors import ConfigError


def _config_dir() -> Path:
    """Presets: shipped inside the wheel as posbench/configs (setup.py), else the checkout's configs/."""
    packaged = Path(__file__).resolve().parent / "configs"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "configs"


CONFIG_DIR = _config_dir()


def preset_names(kind: str) -> list[str]:
    """The presets shipped in configs/<kind>/ (what `--help` lists, so it never goes stale)."""
    return sorted(p.stem for p in (CONFIG_DIR / kind).glob("*.yaml"))


def preset_path(kind: str, name: str) -> Path:
    folder = CONFIG_DIR / kind
    path = folder / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"no {kind} preset `{name}` in {folder}" + nearest(name, preset_names(kind)))
    return path
