"""Typed run configuration: dataclasses, presets, CLI shortcuts and resolve().

    python train.py configs/base.yaml configs/model/tiny.yaml pe.name=alibi model.dropout=0.1
    python train.py --model-size tiny --pe-type alibi          # the same fields, familiar flags

Sources merge left to right: dataclass defaults <- YAML files <- --model-size / --pe-type <- dotted
overrides. Unknown keys and wrong types fail before any work, naming the nearest valid key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from posbench.config_loader import ConfigError, dump_yaml, from_dict, merge_sources, nearest
from posbench.pe import PEConfig, PEContext, validate_pe
from posbench.pe.rope import RoPE

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"

AttentionChoice = Literal["auto", "sdpa", "flex", "flash_alibi", "eager"]


@dataclass
class ModelConfig:
    size: str = "custom"  # preset label, used in run names
    d_model: int = 512
    n_layers: int = 6
    n_heads: int = 8
    d_ff: int = 2048  # SwiGLU hidden width
    seq_len: int = 1024  # training context length
    vocab_size: int = 65536
    tie_embeddings: bool = True
    dropout: float = 0.0  # embeddings and residual branches
    attn_dropout: float = 0.0
    qk_norm: bool = True
    norm_eps: float = 1e-6
    init_std: float = 0.02
    attention: AttentionChoice = "auto"
    head_dim: int = field(init=False, default=0)  # derived

    def __post_init__(self):
        for name in ("d_model", "n_layers", "n_heads", "d_ff", "seq_len", "vocab_size"):
            value = getattr(self, name)
            if value <= 0:
                raise ConfigError(f"model.{name} must be a positive integer, got {value}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.d_model={self.d_model} is not divisible by model.n_heads="
                              f"{self.n_heads}; pick heads that divide it (e.g. {self.d_model // 64 or 1})")
        for name in ("dropout", "attn_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"model.{name} must be in [0, 1), got {getattr(self, name)}")
        if not (self.init_std > 0 and self.norm_eps > 0):
            raise ConfigError("model.init_std and model.norm_eps must be > 0")
        self.head_dim = self.d_model // self.n_heads

    def pe_context(self) -> PEContext:
        return PEContext(self.d_model, self.n_heads, self.n_layers, self.seq_len)


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    pe: PEConfig = field(default_factory=RoPE.Config)
    seed: int = 42

    def resolve(self) -> RunConfig:
        """Cross-field checks and derived values, once, before any work is done."""
        validate_pe(self.pe, self.model.pe_context())
        return self

    def to_yaml(self) -> str:
        return dump_yaml(self)


def preset_path(kind: str, name: str) -> Path:
    folder = CONFIG_DIR / kind
    path = folder / f"{name}.yaml"
    if not path.is_file():
        available = sorted(p.stem for p in folder.glob("*.yaml"))
        raise ConfigError(f"no {kind} preset `{name}` in {folder}" + nearest(name, available))
    return path


def load_config(files: list[str | Path] = (), overrides: list[str] = (), model_size: str | None = None,
                pe_type: str | None = None) -> RunConfig:
    """Merge sources, build the typed config strictly, resolve it."""
    files = list(files)
    if model_size:
        files.append(preset_path("model", model_size))
    shortcuts = [f"pe.name={pe_type}"] if pe_type else []
    merged = merge_sources(files, shortcuts + list(overrides))
    return from_dict(RunConfig, merged).resolve()
