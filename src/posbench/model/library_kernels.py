"""What every optional library kernel declares (`LibraryKernel`): the package that provides it and the devices it
runs on, so that it is off where the package is missing and refused with one line where it cannot apply, before
any work. The options themselves are registered beside the piece they replace: the loss (model/loss_kernels.py),
RMSNorm (model/norms.py), the SwiGLU MLP (model/mlp.py); `model.kernels` (model/kernels_config.py) chooses them.

posbench's own torch path is each piece's `torch` member and stays the reference every option is tested against
(tests/model/test_library_kernels.py: equal values and gradients where the package runs on the CPU, the refusal
where it does not); `gpu_check kernels` times each on the GPU (gpucheck/kernels.py). Design rule: use the field's
kernels, through the same interface.
"""

from __future__ import annotations

import importlib.util
from typing import ClassVar

INSTALL = "pip install -e '.[kernels]'"


class LibraryKernel:
    """One option of one piece. `packages`: the imports it needs (none: torch's own); `devices`: the device types
    it runs on (Triton-only kernels: cuda)."""

    name: ClassVar[str] = ""
    packages: ClassVar[tuple[str, ...]] = ()
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")

    @classmethod
    def available(cls) -> str | None:
        """None when every package it needs is installed, else why not and how to install it."""
        missing = [p for p in cls.packages if importlib.util.find_spec(p) is None]
        return f"{', '.join(missing)} is not installed ({INSTALL})" if missing else None

    @classmethod
    def supports(cls, device_type: str) -> str | None:
        """None when it runs on `device_type` (and is installed), else the reason it does not."""
        missing = cls.available()
        if missing:
            return missing
        if device_type not in cls.devices:
            return f"it runs on {' and '.join(cls.devices)} only (Triton kernels, no {device_type} backend)"
        return None
