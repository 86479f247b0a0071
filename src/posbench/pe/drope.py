"""DroPE (Gelberg et al. 2025, "Extending the Context of Pretrained LLMs by Dropping Their Positional
Embeddings", Sakana AI, arXiv 2512.12167): train with RoPE, which speeds convergence, then remove it from every
layer and continue training briefly at the training length ("recalibration") so the model works as NoPE and
extends to longer contexts zero-shot.

Here a RoPE that can be dropped: `pe.drop_at` (a share of the budget, 0.8) says when (training/schedule.py turns
it into tokens), the loop calls `drop()` at that point (training/loop.py), and from then on the checkpoints'
config says `pe.dropped: true`, so every reader (eval.py, export, the app) rebuilds the model as trained: a NoPE
on the same weights. RoPE has no parameters, so the weights are the same before and after the drop and resuming
across it is exact."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from posbench.errors import ConfigError
from posbench.identity_fields import left_out
from posbench.pe.encoding import PES
from posbench.pe.rope import RopeConfig, RotaryBase


@PES.register("drope")
class DroPE(RotaryBase):
    summary = "DroPE (Sakana 2025): RoPE until pe.drop_at of the budget (0.8), then no PE (recalibrated as NoPE)"

    @dataclass
    class Config(RopeConfig):
        switch_setting: ClassVar[str] = "pe.drop_at"
        switch_after: ClassVar[str] = "as NoPE"
        dropped: bool = False  # set by training at the drop point; true: the model is a NoPE
        # share of the budget trained with RoPE (docs/pe_defaults.md); DroPE's own setting, so a study or sweep row
        # `{name: drope, drop_at: 0.9}` is complete and no other PE has a drop point to misconfigure
        # when, not what (a point of the schedule like the LR decay): a resume or a branch may move it, so no part of
        # a run's identity (training/resume.py check_drop_consistent refuses only putting a dropped PE back)
        drop_at: float = field(default=0.8, metadata=left_out("a point of the schedule"))

        def check(self) -> None:
            super().check()
            if not 0 < self.drop_at < 1:
                raise ConfigError(f"pe.drop_at is the share of the budget trained with RoPE, in (0, 1), got "
                                  f"{self.drop_at}")

        def drop_share(self) -> float | None:
            return self.drop_at

        def after_switch(self) -> bool | None:
            return self.dropped

    def rotate(self, q_BHTK, k_BHTK, pos_T):
        if self.cfg.dropped:
            return q_BHTK, k_BHTK
        return super().rotate(q_BHTK, k_BHTK, pos_T)

    def drop(self):
        self.cfg = dataclasses.replace(self.cfg, dropped=True)
        return self.cfg
