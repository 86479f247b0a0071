"""`model.kernels`: which implementation of each piece a training run builds (model/library_kernels.py): the loss
(model/loss_kernels.py), RMSNorm (model/norms.py) and the SwiGLU MLP (model/mlp.py); `torch` (posbench's own) for
each by default. Every option computes the same function with the same parameters, so like `model.matmul` it is no
part of a run's identity (training/rundir.py), a resume may switch it, and only training asks for it
(training/start.py hands it to model/build.py); evaluation, export and the checks build the torch path."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from posbench.config_loader import Checked
from posbench.errors import ConfigError
from posbench.model.loss_kernels import LOSS_KERNELS
from posbench.model.mlp import MLPS
from posbench.model.norms import NORMS

# train.kernels.<field> -> the registry of its options
PIECES = {"loss": LOSS_KERNELS, "norm": NORMS, "mlp": MLPS}


@dataclass
class KernelsConfig(Checked):
    loss: Literal[tuple(LOSS_KERNELS.names())] = "torch"  # torch | cce | liger_flce
    norm: Literal[tuple(NORMS.names())] = "torch"  # torch | liger
    mlp: Literal[tuple(MLPS.names())] = "torch"  # torch | liger

    def chosen(self) -> dict[str, type]:
        """piece -> the class of its chosen option."""
        return {f.name: PIECES[f.name].get(getattr(self, f.name)) for f in fields(self)}

    @property
    def is_default(self) -> bool:
        return all(getattr(self, f.name) == "torch" for f in fields(self))

    def check_loss_mode(self, loss_mode: str) -> None:
        """A library loss gives no logits, which train.loss=full asks for (RunConfig.resolve)."""
        if self.loss != "torch" and loss_mode == "full":
            raise ConfigError(f"model.kernels.loss={self.loss} fuses the head and the loss (no logits), which "
                              "train.loss=full asks for; use train.loss=auto or chunked")

    def refuse_unusable(self, device_type: str) -> None:
        """ConfigError (one line, before any work) for the first option that cannot run on `device_type`: its
        package missing, or no kernel for that device."""
        for piece, cls in self.chosen().items():
            reason = cls.supports(device_type)
            if reason:
                raise ConfigError(f"model.kernels.{piece}={cls.name} cannot run on {device_type}: {reason}; use "
                                  f"model.kernels.{piece}=torch")
