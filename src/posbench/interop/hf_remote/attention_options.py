"""posbench's attention options in the remote code (torch only): the gate, the temperature and the weightless
QK-norm, each the formula of posbench's model/attention_gate.py, attention_temperature.py and norms.py, with the same
parameter names so a checkpoint's state dict loads as it is. Sinks and chunks are applied in modeling_posbench.py."""

from __future__ import annotations

import math

import torch
from torch import nn


class UnitRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class Gate(nn.Module):
    """out * sigmoid(x W): W (D, D) elementwise, (D, H) headwise."""

    def __init__(self, d_model: int, n_heads: int, kind: str):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model if kind == "elementwise" else n_heads, bias=False)

    def forward(self, x_BTD, out_BTHK):
        g = torch.sigmoid(self.proj(x_BTD))
        return out_BTHK * (g.view(out_BTHK.shape) if g.shape[-1] == x_BTD.shape[-1] else g[..., None])


GATES = {"elementwise", "headwise"}


class Temperature(nn.Module):
    """The factor of each query position p (float32): log_n, ssmax (per head, parameter `s`) or llama4."""

    def __init__(self, cfg: dict, n_heads: int, train_len: int):
        super().__init__()
        self.name = cfg["name"]
        self.cfg = cfg
        if self.name == "ssmax":
            self.s = nn.Parameter(torch.full((n_heads,), float(cfg.get("init", 1.0))))
        self.log_base = math.log(cfg.get("base_len") or train_len)

    def applies(self, position_free: bool) -> bool:
        return self.name != "none" and (position_free or not self.cfg.get("nope_layers_only", False))

    def factor_BHT1(self, pos_BT):
        """pos_BT: (B, T) per row, or (T,) shared by the batch."""
        pos_BT = pos_BT.float() if pos_BT.dim() == 2 else pos_BT.float()[None]
        f = FACTORS[self.name](self, pos_BT)  # (B, T), or (B, H, T) per head
        return (f if f.dim() == 3 else f[:, None])[..., None]


# each temperature's factor of positions p (B, T)
FACTORS = {
    "log_n": lambda t, p: torch.log(p + 1.0) / t.log_base,
    "ssmax": lambda t, p: t.s.float()[:, None] * torch.log(p + 1.0)[:, None, :],
    "llama4": lambda t, p: torch.log1p(torch.floor((p + 1.0) / t.cfg["floor_scale"])) * t.cfg["scale"] + 1.0,
}
TEMPERATURES = {"none", *FACTORS}
