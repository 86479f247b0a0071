"""Model options that would do nothing on this model, refused when a run is configured (`RunConfig.resolve`).

A run's name and identity name every attention option set away from its default (training/rundir.py), so an option
that changes nothing would still rename the run and split identical runs into two directories, and a reader of the
name would believe the run was trained with it. The rule is stated once, here, from what the model would build: an
option is a no-op when the model it gives normalises and tempers exactly the layers the default does.

- `model.qk_norm_weight` / `model.qk_norm_layers` with `model.qk_norm=false`: no layer normalises q and k.
- `model.qk_norm_layers=positional` on a model with no position-free layer: every layer normalises, as with `all`.
- a temperature that tempers only position-free layers (`nope_layers_only`: llama4's default) on a model with none.

Which layers are position-free comes from the PE itself (`layer_pe(layer).position_free`, as transformer.Block and
Attention read it), built on the meta device: no memory, no tables computed. A checkpoint's saved config is read as
it was trained (`resolve(saved=True)`), so runs made before this rule stay readable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from posbench.errors import ConfigError
from posbench.model.attention_temperature import build_temperature
from posbench.model.transformer import QK_NORM_LAYERS
from posbench.pe import PES, PEConfig

if TYPE_CHECKING:
    from posbench.model.model_config import ModelConfig

NOPE_HINT = "or use a PE with position-free layers (e.g. pe.name=hybrid: NoPE every 4th layer)"


def layer_pes(cfg: ModelConfig, pe_cfg: PEConfig) -> list:
    """Each layer's PE as the model would build it, on the meta device (kinds and options only, no storage)."""
    with torch.device("meta"):
        pe = PES.build(pe_cfg, cfg.pe_context())
    return [pe.layer_pe(layer) for layer in range(cfg.n_layers)]


def refuse_noop_options(cfg: ModelConfig, pe_cfg: PEConfig) -> None:
    """ConfigError naming the first option set away from its default that changes nothing on this model (module
    doc), with what to do instead."""
    if not cfg.qk_norm:
        for option, default, value in (("qk_norm_weight", True, cfg.qk_norm_weight),
                                       ("qk_norm_layers", "all", cfg.qk_norm_layers)):
            if value != default:
                raise ConfigError(f"model.{option}={str(value).lower()} does nothing with model.qk_norm=false (no "
                                  f"layer normalises q and k), yet it would name the run; leave it at its default "
                                  f"({str(default).lower()}), or set model.qk_norm=true")
    temperature = cfg.attention_temperature
    layers_set = cfg.qk_norm and cfg.qk_norm_layers != "all"
    if not layers_set and temperature.name == "none":
        return  # nothing else depends on the layers' PEs: no PE is built
    pes = layer_pes(cfg, pe_cfg)
    with torch.device("meta"):
        temper = build_temperature(temperature, cfg.n_heads, cfg.seq_len)
    free = "no layer of this model is position-free (pe.name=" + pe_cfg.name + ")"
    if layers_set and all(QK_NORM_LAYERS[cfg.qk_norm_layers](pe) == QK_NORM_LAYERS["all"](pe) for pe in pes):
        raise ConfigError(f"model.qk_norm_layers={cfg.qk_norm_layers} does nothing: {free}, so every layer normalises "
                          f"q and k as with `all`, yet it would name the run; leave it at all, {NOPE_HINT}")
    if temper.active and not any(temper.applies(pe.position_free) for pe in pes):
        raise ConfigError(f"model.attention_temperature={temperature.name} does nothing: it tempers only "
                          f"position-free layers (attention_temperature.nope_layers_only=true) and {free}, yet it "
                          "would name the run; set model.attention_temperature.nope_layers_only=false to temper every "
                          f"layer, {NOPE_HINT}")
