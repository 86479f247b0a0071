"""GPT-2 initialisation (Radford et al. 2019, section 2.3), shared by every architecture: every matrix
N(0, init_std); the projections that write into the residual stream N(0, init_std / sqrt(number of residual
writes in the stack)) so the residual variance does not grow with depth. Norms start at 1 (their own init);
each PE initialises its own parameters. Call order is the draw order: keep it when changing callers."""

from __future__ import annotations

import math

import torch
from torch import nn


@torch.no_grad()
def init_embeddings(tok_emb: nn.Embedding, lm_head: nn.Linear, tied: bool, std: float) -> None:
    nn.init.normal_(tok_emb.weight, std=std)
    if not tied:
        nn.init.normal_(lm_head.weight, std=std)


@torch.no_grad()
def init_residual_block(std: float, n_writes: int, reading: list[nn.Linear], writing: list[nn.Linear]) -> None:
    for linear in reading:
        nn.init.normal_(linear.weight, std=std)
    for linear in writing:
        nn.init.normal_(linear.weight, std=std / math.sqrt(n_writes))
