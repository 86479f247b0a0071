"""DoPE's settings (`posbench eval --dope`, `--set dope.n_heads=5`; a study arm's `eval: {dope: {...}}`), typed
and strictly loaded: the defaults are the headline row of both arXiv versions' Table 1 (DoPE-by-Gaussian on keys,
Trunc-32, 3 heads, ascending), read as docs/pe_defaults.md "DoPE" states.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from posbench.config_loader import Checked
from posbench.errors import ConfigError
from posbench.evaluation.dope_modes import DopeModeConfig, Gaussian


@dataclass
class DopeConfig(Checked):
    # calibration sequences at the evaluated length: the paper does not say how many (v2 section 4.1: "calibration
    # data matched in length to the test data"); from the evaluated data, drawn with `calibration_seed`
    n_calibration: int = 8
    calibration_seed: int = 7919  # not the evaluation's seed: the calibration rows are not the scored ones
    # which vectors the Gram is collected from: after the model's own rotation (with --rope-scaling dynamic, the
    # paper's post-NTK criterion) or before it (pre-NTK: no PE)
    stage: Literal["post_rope", "pre_rope"] = "post_rope"
    indicator: Literal["keys", "queries"] = "keys"
    truncate: int = 32  # r of v1 eq. 30 (min(r, head dim)): "Trunc-32"
    n_heads: int = 3  # heads chosen over every layer x head at once
    order: Literal["ascending", "descending"] = "ascending"  # ascending: the lowest scores are chosen
    mode: DopeModeConfig = field(default_factory=Gaussian.Config)

    def check(self) -> None:
        if not 1 <= self.n_calibration <= 4096:
            raise ConfigError(f"dope.n_calibration must be in 1 .. 4096 sequences, got {self.n_calibration}")
        if self.calibration_seed < 0:
            raise ConfigError(f"dope.calibration_seed must be >= 0, got {self.calibration_seed}")
        if self.truncate < 1:
            raise ConfigError(f"dope.truncate must be >= 1 (r of the truncated entropy), got {self.truncate}")
        if self.n_heads < 1:
            raise ConfigError(f"dope.n_heads must be >= 1, got {self.n_heads}")
