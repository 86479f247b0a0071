"""Decoder-only transformer: pre-norm RMSNorm, SwiGLU, QK-norm, tied embeddings. No PE names here:
the PE is reached only through its hooks (see pe/encoding.py), the kernel through its call.

Shape legend: B batch, T tokens, D model dim, V vocabulary.

`model.packing` (model/packing.py) says what a position means in a packed window: with a switch on, the batch's
documents are found once per forward (at `packing.bos_id`) and every layer gets them; positions become per row
(B, T) when they restart at each document. The default (causal/window) runs exactly as before.

Initialisation: GPT-2's (model/init.py); the two projections that write into the residual stream
(attention out, MLP down) get N(0, init_std / sqrt(2 n_layers)).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

import torch
from torch import nn

from posbench.model.attention import Attention, CarriedState, KVCache
from posbench.model.attention_temperature import build_temperature
from posbench.model.embedding import TokenEmbedding
from posbench.model.init import init_embeddings, init_residual_block
from posbench.model.kernels import select_kernel
from posbench.model.kernels_config import KernelsConfig
from posbench.model.loss import auto_chunk_tokens
from posbench.model.loss_kernels import LOSS_KERNELS
from posbench.model.mlp import MLPS
from posbench.model.norms import NORMS
from posbench.model.output import ModelOutput
from posbench.model.packing import Documents, split_documents
from posbench.pe import PES, PEConfig, PositionalEncoding

if TYPE_CHECKING:  # annotations only: model/build.py is what pairs a config with this class
    from posbench.model.model_config import ModelConfig


# model.qk_norm_layers: which layers (by their PE) normalise q and k when model.qk_norm is on
QK_NORM_LAYERS = {"all": lambda pe: True, "positional": lambda pe: not pe.position_free}


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, kernel, kernels: KernelsConfig | None = None):
        """`kernels`: model.kernels, the implementations of the norms and the MLP (model/kernels_config.py)."""
        super().__init__()
        kernels = kernels or KernelsConfig()
        norm, mlp = NORMS.get(kernels.norm), MLPS.get(kernels.mlp)
        self.attn_norm = norm(cfg.d_model, cfg.norm_eps)
        qk_norm = cfg.qk_norm and QK_NORM_LAYERS[cfg.qk_norm_layers](kernel.pe)
        self.attn = Attention(cfg.d_model, cfg.n_heads, layer, kernel, qk_norm, cfg.norm_eps, cfg.dropout,
                              cfg.attention_gate, cfg.attention_sinks,
                              build_temperature(cfg.attention_temperature, cfg.n_heads, cfg.seq_len),
                              cfg.qk_norm_weight)
        self.mlp_norm = norm(cfg.d_model, cfg.norm_eps)
        self.mlp = mlp(cfg.d_model, cfg.d_ff, cfg.dropout)

    def forward(self, x_BTD, pos_T, pe, cache=None, docs=None, state: CarriedState | None = None):
        state = state or CarriedState()
        x_BTD = x_BTD + self.attn(self.attn_norm(x_BTD), pos_T, pe, cache, docs, state)
        mlp_BTD = self.mlp(self.mlp_norm(x_BTD))
        state.value = pe.carry_mlp(self.attn.layer, mlp_BTD, state.value)  # TAPE's MLP update reads the output
        return x_BTD + mlp_BTD


def layer_window(cfg: ModelConfig, pe: PositionalEncoding, layer: int) -> int | None:
    """A layer's sliding window: model.attention_window's and the PE's (RNoPE-SWA), the smaller when both set one."""
    windows = [w for w in (cfg.layer_window(layer), pe.layer_window(layer)) if w is not None]
    return min(windows) if windows else None


def causal_blocks(cfg: ModelConfig, pe: PositionalEncoding, n_layers: int, device_type: str, block_cls):
    """`n_layers` blocks of causal self-attention, each with the kernel chosen once for its layer's PE and
    sliding window; returns them and the kernel names (reported by describe_model and the run log)."""
    blocks, names = [], []
    for layer in range(n_layers):
        kernel = select_kernel(cfg.attention, pe.layer_pe(layer), device_type, cfg.attn_dropout, cfg.packing,
                               layer_window(cfg, pe, layer), chunk=cfg.layer_chunk(layer))
        names.append(kernel.name)
        blocks.append(block_cls(cfg, layer, kernel))
    return nn.ModuleList(blocks), names


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, pe_cfg: PEConfig, device_type: str = "cpu",
                 loss_chunk_tokens: int | None = None, kernels: KernelsConfig | None = None):
        """`loss_chunk_tokens`: tokens per chunk of the fused head + loss (model/loss.py), 0 for plain logits,
        None for the default by vocabulary (`auto_chunk_tokens`); a run's `train.loss` and
        `train.loss_chunk_tokens` arrive here through `build_model`, as `model.kernels` does (`kernels`: the
        loss, norm and MLP implementations, refused here when one cannot run on `device_type`). Fixed for the
        model's life."""
        super().__init__()
        kernels = kernels or KernelsConfig()
        kernels.refuse_unusable(device_type)
        self.cfg = cfg
        self.pe: PositionalEncoding = PES.build(pe_cfg, cfg.pe_context())
        self.tok_emb = TokenEmbedding(cfg.vocab_size, cfg.d_model, cfg.embed_scale)
        self.emb_dropout = nn.Dropout(cfg.dropout)
        self.blocks, self.kernel_names = causal_blocks(cfg, self.pe, cfg.n_layers, device_type,
                                                       functools.partial(Block, kernels=kernels))
        self.norm = NORMS.get(kernels.norm)(cfg.d_model, cfg.norm_eps)
        self.loss = LOSS_KERNELS.get(kernels.loss)(device_type)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self.loss_chunk_tokens = auto_chunk_tokens(cfg.vocab_size) if loss_chunk_tokens is None else loss_chunk_tokens
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        std = self.cfg.init_std
        init_embeddings(self.tok_emb, self.lm_head, self.cfg.tie_embeddings, std)
        for block in self.blocks:  # two residual writes per block
            init_residual_block(std, 2 * self.cfg.n_layers,
                                [block.attn.qkv, block.mlp.gate, block.mlp.up, *block.attn.gate.linears()],
                                [block.attn.proj, block.mlp.down])

    def positions(self, T: int, device, offset: int = 0) -> torch.Tensor:
        return self.pe.positions(T, device, offset)

    def packed_positions(self, idx_BT, pos_T=None, cache: KVCache | None = None, data_pos_BT=None):
        """(positions, documents) of a batch: positions (T,) shared by the batch, or per row (B, T) when they
        restart at every document; documents (model/packing.py) None unless `model.packing` splits windows at
        its bos_id. Positions the caller gives are used as given. `data_pos_BT`, the ids the data carries (a
        task's digit places), go to the PE's `data_positions` with the default positions as a thunk: a PE that
        ignores the ids makes (and checks) its own, one that reads them never makes positions it would not use."""
        T = idx_BT.shape[1]
        offset = cache.length if cache else 0
        docs = None

        def default():
            return self.positions(T, idx_BT.device, offset)

        if self.cfg.packing.active:
            state = cache.documents if cache else None
            doc_BT, within_BT, new_state = split_documents(idx_BT, self.cfg.packing.bos_id, offset, state)
            if cache is not None:
                cache.documents = new_state
            docs = Documents(doc_BT, new_state.doc_BS, self.cfg.packing.mask == "document")
            if pos_T is None and self.cfg.packing.positions == "document":
                def default():
                    return self.pe.document_positions(within_BT, doc_BT)
        if pos_T is None and data_pos_BT is not None:
            return self.pe.data_positions(data_pos_BT.to(idx_BT.device), default), docs
        if pos_T is None:
            return default(), docs
        pos_T = pos_T.float()
        self.pe.check_positions(int(pos_T.max().item()) + 1)
        return pos_T, docs

    def hidden(self, idx_BT, pos_T=None, cache: KVCache | None = None, data_pos_BT=None):
        B, T = idx_BT.shape
        pos_T, docs = self.packed_positions(idx_BT, pos_T, cache, data_pos_BT)
        x_BTD = self.emb_dropout(self.pe.embed(self.tok_emb(idx_BT), pos_T))
        state = CarriedState(self.pe.start_state(pos_T))
        for layer, block in enumerate(self.blocks):
            x_BTD = block(x_BTD, pos_T, self.pe.layer_pe(layer), cache.layers[layer] if cache else None, docs, state)
        if cache is not None:
            cache.length += T
        return self.norm(x_BTD), pos_T

    def forward(self, idx_BT, targets_BT=None, pos_T=None, cache: KVCache | None = None, *,
                logit_moments: bool = False, data_pos_BT=None) -> ModelOutput:
        """The logits (B, T, V); with targets also the mean cross-entropy over targets != -100. With targets
        and `loss_chunk_tokens` > 0 the head and loss are fused (model/loss.py): no logits, and their moments
        when `logit_moments` asks (model/output.py has the fields). `data_pos_BT`: per-token position ids the data
        carries (B, T) int, for the new tokens only when decoding with a cache; the PE's `data_positions` hook
        decides their meaning (most PEs ignore them)."""
        h_BTD, pos_T = self.hidden(idx_BT, pos_T, cache, data_pos_BT)
        if targets_BT is None:
            return ModelOutput(logits=self.lm_head(h_BTD))
        out = self.loss(h_BTD, self.lm_head.weight, targets_BT, self.loss_chunk_tokens, self.lm_head, logit_moments)
        # the PE's own objective (SeqPE's), training only: the step adds it to the loss it minimises
        aux = self.pe.aux_loss(pos_T) if self.training else None
        return out if aux is None else dataclasses.replace(out, aux_loss=aux)

    def new_cache(self) -> KVCache:
        return KVCache.empty(self.cfg.n_layers)

    @torch.no_grad()
    def attention_scores(self, idx_BT, pos_T=None, data_pos_BT=None) -> list[torch.Tensor]:
        """Per layer, the pre-softmax logits (B, H, T, T) incl. PE bias and causal -inf (analysis)."""
        return self._per_layer("scores", idx_BT, pos_T, data_pos_BT)

    @torch.no_grad()
    def attention_probs(self, idx_BT, pos_T=None, data_pos_BT=None) -> list[torch.Tensor]:
        """Per layer, the attention probabilities (B, H, T, T) over the keys, a learned sink's share taken out."""
        return self._per_layer("probs", idx_BT, pos_T, data_pos_BT)

    def _per_layer(self, what: str, idx_BT, pos_T, data_pos_BT) -> list[torch.Tensor]:
        pos_T, docs = self.packed_positions(idx_BT, pos_T, data_pos_BT=data_pos_BT)
        x_BTD = self.pe.embed(self.tok_emb(idx_BT), pos_T)
        state = CarriedState(self.pe.start_state(pos_T))
        out = []
        for layer, block in enumerate(self.blocks):
            pe = self.pe.layer_pe(layer)
            out.append(getattr(block.attn, what)(block.attn_norm(x_BTD), pos_T, pe, docs, state))
            x_BTD = block(x_BTD, pos_T, pe, None, docs, state)
        return out
