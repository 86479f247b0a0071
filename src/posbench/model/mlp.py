"""SwiGLU feed-forward (Shazeer 2020, "GLU Variants Improve Transformer", eq. 6): three matrices,
d_ff is the hidden width (the presets' d_ff counts as given, no 2/3 rescaling)."""

import torch.nn.functional as F
from torch import nn


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x_BTD):
        return self.dropout(self.down(F.silu(self.gate(x_BTD)) * self.up(x_BTD)))
