"""AdamW with decay / no-decay parameter groups.

Weight decay applies to the matrices of the transformer (attention, MLP, token embedding / tied
head). It does not apply to norm gains, and not to PE parameters unless their PE lists them in
`decay_params()` (pe/encoding.py): a learned position table, T5 or KERPLE biases and RoPE frequencies
encode *where*, and decaying them toward zero would quietly pull every PE toward NoPE, confounding the
comparison this project exists for. FoX lists its forget-gate weight, as its authors decay it. Every PE
module of the model counts (hybrid members, a wrapper's inner PE, the encoder-decoder's decoder PE). A
parameter marked `_no_weight_decay` (mambapy's convention: Mamba's A_log and D) is not decayed either.
"""

from __future__ import annotations

import torch
from torch import nn

from posbench.pe.encoding import PositionalEncoding
from posbench.training.train_config import OptimConfig


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    pes = [m for m in model.modules() if isinstance(m, PositionalEncoding)]
    pe_params = {id(p) for pe in pes for p in pe.parameters()}
    pe_decayed = {id(p) for pe in pes for p in pe.decay_params()}
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decays = id(p) in pe_decayed if id(p) in pe_params else p.ndim >= 2
        (decay if decays and not getattr(p, "_no_weight_decay", False) else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay, "name": "decay"},
            {"params": no_decay, "weight_decay": 0.0, "name": "no_decay"}]


def build_optimizer(model: nn.Module, cfg: OptimConfig, device_type: str) -> torch.optim.AdamW:
    # fused AdamW on CUDA: one kernel for all parameters; foreach elsewhere
    fused = device_type == "cuda"
    return torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                             eps=cfg.eps, fused=fused)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
