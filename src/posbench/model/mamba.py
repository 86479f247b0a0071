"""Mamba language model (Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling with Selective State
Spaces"): token embedding, `model.n_layers` residual Mamba blocks, RMSNorm, tied LM head.

Shape legend: B batch, T tokens, D model dim, V vocabulary.

The blocks are the maintained pure-PyTorch implementation from the `mambapy` package (mamba.py,
A. Torres-Leguet): selective scan as a parallel scan (Blelloch, pscan.py) when training, one recurrent
step per token when generating. With the `mamba-ssm` CUDA kernels installed and a CUDA device, mambapy
uses their fused selective scan instead. There is no positional encoding: the recurrence orders the
tokens (config.resolve() refuses any `pe` but `none`).

Generation: `new_cache()` holds each block's SSM state h (B, E*D, N) and its last d_conv - 1 conv
inputs; every token, prompt included, goes through `step`, so the cached logits equal the full
forward's (tests/model/test_mamba.py).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from mambapy.mamba import Mamba, MambaConfig
from torch import nn

from posbench.model.embedding import TokenEmbedding
from posbench.model.init import init_embeddings
from posbench.model.loss import cross_entropy
from posbench.model.norms import RMSNorm
from posbench.model.output import ModelOutput
from posbench.pe import PES, PEConfig, PositionalEncoding

if TYPE_CHECKING:  # annotations only: model/build.py is what pairs a config with this class
    from posbench.model.arch import MambaArch
    from posbench.model.model_config import ModelConfig


@dataclass
class MambaCache:
    layers: list = field(default_factory=list)  # per block: (h_BEN or None, conv inputs (B, E*D, d_conv-1))
    length: int = 0


def mamba_ssm_available(device_type: str) -> bool:
    return device_type == "cuda" and importlib.util.find_spec("mamba_ssm") is not None


class MambaLM(nn.Module):
    def __init__(self, cfg: ModelConfig, pe_cfg: PEConfig, arch: MambaArch, device_type: str = "cpu"):
        super().__init__()
        self.cfg, self.arch = cfg, arch
        self.pe: PositionalEncoding = PES.build(pe_cfg, cfg.pe_context())  # `none`: only its positions()
        self.tok_emb = TokenEmbedding(cfg.vocab_size, cfg.d_model, cfg.embed_scale)
        self.emb_dropout = nn.Dropout(cfg.dropout)
        self.mcfg = MambaConfig(d_model=cfg.d_model, n_layers=cfg.n_layers, dt_rank=arch.dt_rank or "auto",
                                d_state=arch.d_state, expand_factor=arch.expand, d_conv=arch.d_conv,
                                rms_norm_eps=cfg.norm_eps, pscan=True, use_cuda=mamba_ssm_available(device_type))
        self.kernel_names = ["mamba-ssm" if self.mcfg.use_cuda else "pscan"] * cfg.n_layers
        self.mamba = Mamba(self.mcfg)  # mambapy initialises its blocks (S4D-real A, dt in [dt_min, dt_max])
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        init_embeddings(self.tok_emb, self.lm_head, cfg.tie_embeddings, cfg.init_std)

    @property
    def blocks(self) -> list[nn.Module]:
        """The residual Mamba blocks (per-layer metrics, FSDP sharding)."""
        return list(self.mamba.layers)

    def positions(self, T: int, device, offset: int = 0) -> torch.Tensor:
        return self.pe.positions(T, device, offset)

    def new_cache(self) -> MambaCache:
        return MambaCache([None] * self.cfg.n_layers)

    def _step(self, x_BD, cache: MambaCache):
        if cache.layers[0] is None:  # first token: zero state and zero conv history
            zeros = x_BD.new_zeros(x_BD.shape[0], self.mcfg.d_inner, self.mcfg.d_conv - 1)
            cache.layers = [(None, zeros) for _ in range(self.cfg.n_layers)]
        y_BD, cache.layers = self.mamba.step(x_BD, cache.layers)
        cache.length += 1
        return y_BD

    def hidden(self, idx_BT, pos_T=None, cache: MambaCache | None = None):
        """The final normed states (B, T, D) and the positions, as the decoder's `hidden` (evaluation
        computes chunked per-token losses from them). `pos_T` is ignored: a recurrence has no positions
        to move."""
        x_BTD = self.emb_dropout(self.tok_emb(idx_BT))
        if cache is None:
            h_BTD = self.mamba(x_BTD)
        else:
            h_BTD = torch.stack([self._step(x_BTD[:, t], cache) for t in range(idx_BT.shape[1])], dim=1)
        return self.norm(h_BTD), self.positions(idx_BT.shape[1], idx_BT.device)

    def forward(self, idx_BT, targets_BT=None, pos_T=None, cache: MambaCache | None = None, *,
                logit_moments: bool = False, data_pos_BT=None) -> ModelOutput:
        """Logits (B, T, V); with targets also the mean cross-entropy over targets != -100. The logits are
        always made, so `logit_moments` (the decoder's fused-loss request) gives nothing more (model/output.py).
        A task's own position ids (`data_pos_BT`) are not used: the recurrence has no positions to replace."""
        h_BTD, _ = self.hidden(idx_BT, pos_T, cache)
        logits_BTV = self.lm_head(h_BTD)
        loss = None if targets_BT is None else cross_entropy(logits_BTV, targets_BT)
        return ModelOutput(loss=loss, logits=logits_BTV)

    def attention_scores(self, idx_BT, pos_T=None, data_pos_BT=None) -> list[torch.Tensor]:
        """A state-space model has no attention: nothing to show."""
        return []

    def attention_probs(self, idx_BT, pos_T=None, data_pos_BT=None) -> list[torch.Tensor]:
        return []
