"""RoPE length extension chosen at evaluation time (`--rope-scaling pi|ntk|dynamic|yarn|yarn_paper --rope-factor 4`).

Scaling is a property of each rotary module (pe/rope.py `set_scaling`), and rotary modules can sit
inside wrappers (hybrid per-layer patterns, randomized positions). So the evaluator walks the model's
modules and rescales every RotaryBase it finds, whatever wraps it; a model with none refuses the option
instead of silently evaluating unscaled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

from posbench.errors import ConfigError
from posbench.pe.rope import RotaryBase
from posbench.pe.rope_scaling import ScalingConfig


def rotary_modules(model: nn.Module) -> list[RotaryBase]:
    return [m for m in model.modules() if isinstance(m, RotaryBase)]


def check_rope_scaling(model: nn.Module, scaling: ScalingConfig | None, where: str) -> None:
    """Fail before any work when a scaling is asked for a model without rotary PEs."""
    if scaling is not None and not rotary_modules(model):
        pe = getattr(model, "pe", None)
        raise ConfigError(f"{where}: --rope-scaling {scaling.name} needs a rotary PE (rope, lrope, prope, xpos, "
                          f"modded_rope, hope, fope, or "
                          f"a hybrid/randomized wrapper around one), but this model's PE is "
                          f"`{getattr(pe, 'name', '?')}`; drop --rope-scaling for it or evaluate it separately")


def apply_rope_scaling(model: nn.Module, scaling: ScalingConfig | None, where: str = "model") -> list[dict]:
    """Set `scaling` on every rotary module; returns what each had before (for results.json)."""
    if scaling is None:
        return []
    check_rope_scaling(model, scaling, where)
    before = []
    for module in rotary_modules(model):
        before.append({"pe": module.name, "name": module.scaling_config.name,
                       "factor": module.scaling_config.factor})
        module.set_scaling(scaling)
    return before


@contextlib.contextmanager
def scaled(model: nn.Module, scaling: ScalingConfig | None, where: str = "model") -> Iterator[None]:
    """The model with `scaling` on every rotary module inside the block, each module's own scaling again after it
    (a study cell scored with an arm's scaling leaves the model as it trained for the next scoring)."""
    if scaling is None:
        yield
        return
    check_rope_scaling(model, scaling, where)
    modules = rotary_modules(model)
    before = [m.scaling_config for m in modules]
    try:
        for m in modules:
            m.set_scaling(scaling)
        yield
    finally:
        for m, cfg in zip(modules, before, strict=True):
            m.set_scaling(cfg)
