"""Token embeddings, optionally multiplied by a constant on the way in (`model.embed_scale`).

Vaswani et al. 2017 (section 3.4) multiply the embeddings by sqrt(d_model) so that tokens are as loud as
an added table PE of unit amplitude; the reference framework does this whenever it uses a table PE.
Our default ("none") leaves GPT-2 style embeddings (std init_std) as they are and scales the sinusoidal
table down instead (pe/sinusoidal.py). The tied LM head reads the unscaled weight either way.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from posbench.registry import Registry

# model.embed_scale -> the multiplier for a model width d
EMBED_SCALES = Registry("embedding scale", where="model.embed_scale")


@EMBED_SCALES.register("none")
class NoScale:
    @staticmethod
    def factor(d_model: int) -> float:
        return 1.0


@EMBED_SCALES.register("sqrt_d")
class SqrtD:
    @staticmethod
    def factor(d_model: int) -> float:  # Vaswani et al. 2017, section 3.4
        return math.sqrt(d_model)


class TokenEmbedding(nn.Embedding):
    def __init__(self, vocab_size: int, d_model: int, scale_name: str = "none"):
        super().__init__(vocab_size, d_model)
        self.scale = EMBED_SCALES.get(scale_name).factor(d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = super().forward(idx)
        return x * self.scale if self.scale != 1.0 else x
