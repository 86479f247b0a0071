"""Encoder-decoder transformer (Vaswani et al. 2017) with the decoder's building blocks: pre-norm
RMSNorm, SwiGLU, QK-norm, tied embeddings, GPT-2 initialisation (see transformer.py).

Shape legend: B batch, T row tokens, S source tokens, U decoder tokens, D model dim, V vocabulary.

It reads the same rows as the decoder-only model, `source <source_end> target <end> <pad>...`, so the
training loop, the task sources and the teacher-forced scorer are shared. Each row is split at its first
`source_end` token (model.arch.source_end, bound from the task): the encoder reads the source
bidirectionally (padding masked), the decoder reads `<source_end> target` causally (the separator plays
the start-of-sequence token) and cross-attends to the encoder. Decoder logits are put back at the row
positions they predict from, so logits (B, T, V) line up with the row's targets exactly as the
decoder-only model's do; source positions get zero logits (their targets are ignored).

PEs: `pe` is the encoder's, `model.arch.decoder_pe` the decoder's, both any registered PE, each with
positions from 0 in its own stack. Absolute PEs add to that stack's embeddings; rotary and bias PEs act
in that stack's self-attention only; cross-attention uses no PE.

Generation: `new_cache()`; the first call with a cache encodes the source and stores the encoder's
cross-attention keys and values, later calls feed one decoder token each through the decoder's
`KVCache` (all rows of a cached batch must share their split point: generate.py groups prompts by length).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

from posbench.model.attention import Attention, KVCache
from posbench.model.cross_attention import BidirectionalAttention, CrossAttention
from posbench.model.embedding import TokenEmbedding
from posbench.model.init import init_embeddings, init_residual_block
from posbench.model.loss import cross_entropy
from posbench.model.mlp import SwiGLU
from posbench.model.norms import RMSNorm
from posbench.model.output import ModelOutput
from posbench.model.transformer import causal_blocks
from posbench.pe import PES, PEConfig, PositionalEncoding

if TYPE_CHECKING:  # annotations only: model/build.py is what pairs a config with this class
    from posbench.model.arch import EncoderDecoderArch
    from posbench.model.model_config import ModelConfig


class EncoderBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = BidirectionalAttention(cfg.d_model, cfg.n_heads, layer, cfg.qk_norm, cfg.norm_eps, cfg.dropout,
                                           cfg.attn_dropout)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg.d_model, cfg.d_ff, cfg.dropout)

    def forward(self, x_BSD, pos_S, pe, keep_BS):
        x_BSD = x_BSD + self.attn(self.attn_norm(x_BSD), pos_S, pe, keep_BS)
        return x_BSD + self.mlp(self.mlp_norm(x_BSD))


class DecoderBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, kernel):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg.d_model, cfg.n_heads, layer, kernel, cfg.qk_norm, cfg.norm_eps, cfg.dropout)
        self.cross_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.cross = CrossAttention(cfg.d_model, cfg.n_heads, cfg.qk_norm, cfg.norm_eps, cfg.dropout, cfg.attn_dropout)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg.d_model, cfg.d_ff, cfg.dropout)

    def forward(self, x_BUD, pos_U, pe, memory_kv, keep_BS, cache=None):
        x_BUD = x_BUD + self.attn(self.attn_norm(x_BUD), pos_U, pe, cache)
        x_BUD = x_BUD + self.cross(self.cross_norm(x_BUD), *memory_kv, keep_BS)
        return x_BUD + self.mlp(self.mlp_norm(x_BUD))


@dataclass
class EncDecCache:
    """Decoder self-attention KV cache plus, per layer, the encoder output's cross-attention K and V."""

    decoder: KVCache
    memory_kv: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    keep_BS: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return self.decoder.length


class EncoderDecoder(nn.Module):
    def __init__(self, cfg: ModelConfig, pe_cfg: PEConfig, arch: EncoderDecoderArch, device_type: str = "cpu"):
        super().__init__()
        self.cfg, self.arch = cfg, arch
        self.n_dec = arch.n_decoder_layers or cfg.n_layers
        self.pe: PositionalEncoding = PES.build(pe_cfg, cfg.pe_context())
        self.dec_pe: PositionalEncoding = PES.build(arch.decoder_pe, cfg.pe_context())
        self.tok_emb = TokenEmbedding(cfg.vocab_size, cfg.d_model, cfg.embed_scale)
        self.emb_dropout = nn.Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(EncoderBlock(cfg, layer) for layer in range(cfg.n_layers))
        self.decoder, self.kernel_names = causal_blocks(cfg, self.dec_pe, self.n_dec, device_type, DecoderBlock)
        self.enc_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        std = self.cfg.init_std
        init_embeddings(self.tok_emb, self.lm_head, self.cfg.tie_embeddings, std)
        # residual-writing projections: std / sqrt(number of residual writes in the stack), as GPT-2
        for block in self.encoder:
            init_residual_block(std, len(self.encoder) * 2, [block.attn.qkv, block.mlp.gate, block.mlp.up],
                       [block.attn.proj, block.mlp.down])
        for block in self.decoder:
            init_residual_block(std, len(self.decoder) * 3,
                       [block.attn.qkv, block.cross.q, block.cross.kv, block.mlp.gate, block.mlp.up],
                       [block.attn.proj, block.cross.proj, block.mlp.down])

    @property
    def blocks(self) -> list[nn.Module]:
        """Every residual block, encoder then decoder (per-layer metrics, FSDP sharding)."""
        return [*self.encoder, *self.decoder]

    def positions(self, T: int, device, offset: int = 0) -> torch.Tensor:
        return self.dec_pe.positions(T, device, offset)

    def new_cache(self) -> EncDecCache:
        return EncDecCache(KVCache.empty(self.n_dec))

    # -- the two stacks -------------------------------------------------------------------------------------
    def encode(self, src_BS, keep_BS):
        """Encoder output (B, S, D) of a left-aligned source, keep_BS False at padding."""
        pos_S = self.pe.positions(src_BS.shape[1], src_BS.device)
        x_BSD = self.emb_dropout(self.pe.embed(self.tok_emb(src_BS), pos_S))
        for layer, block in enumerate(self.encoder):
            x_BSD = block(x_BSD, pos_S, self.pe.layer_pe(layer), keep_BS)
        return self.enc_norm(x_BSD)

    def memory(self, src_BS, keep_BS) -> list[tuple[torch.Tensor, torch.Tensor]]:
        mem_BSD = self.encode(src_BS, keep_BS)
        return [block.cross.memory_kv(mem_BSD) for block in self.decoder]

    def decode(self, tgt_BU, memory_kv, keep_BS, cache: KVCache | None = None):
        """Decoder logits (B, U, V); with a cache, tgt continues the tokens already in it."""
        pos_U = self.dec_pe.positions(tgt_BU.shape[1], tgt_BU.device, cache.length if cache else 0)
        x_BUD = self.emb_dropout(self.dec_pe.embed(self.tok_emb(tgt_BU), pos_U))
        for layer, block in enumerate(self.decoder):
            x_BUD = block(x_BUD, pos_U, self.dec_pe.layer_pe(layer), memory_kv[layer], keep_BS,
                          cache.layers[layer] if cache else None)
        if cache is not None:
            cache.length += tgt_BU.shape[1]
        return self.lm_head(self.norm(x_BUD))

    # -- the decoder-only interface over `source <source_end> target` rows -----------------------------------
    def split_rows(self, idx_BT):
        """(source_BS, keep_BS, boundary_B): each row's tokens before its first source_end."""
        is_end_BT = idx_BT == self.arch.source_end
        if not bool(is_end_BT.any(1).all()):
            raise ValueError(f"encoder_decoder: a row has no source_end token (id {self.arch.source_end}); rows "
                             f"must look like `source <source_end> target`")
        boundary_B = is_end_BT.int().argmax(1)
        S = max(1, int(boundary_B.max()))
        keep_BS = torch.arange(S, device=idx_BT.device)[None, :] < boundary_B[:, None]
        keep_BS[:, 0] = True  # an empty source still needs one key; it is a pad token, learned as "nothing"
        src_BS = torch.where(keep_BS, idx_BT[:, :S], torch.zeros_like(idx_BT[:, :S]))
        return src_BS, keep_BS, boundary_B

    def forward(self, idx_BT, targets_BT=None, pos_T=None, cache: EncDecCache | None = None, *,
                logit_moments: bool = False, data_pos_BT=None) -> ModelOutput:
        """Logits (B, T, V) at row positions; with targets also the mean cross-entropy over targets != -100.
        The logits are always made, so `logit_moments` (the decoder's fused-loss request) gives nothing more
        (model/output.py). `pos_T` is not supported: each stack counts its own positions from 0, and a task's own
        position ids (`data_pos_BT`) are not used for the same reason."""
        if pos_T is not None:
            raise ValueError("encoder_decoder: explicit positions are not supported; each stack numbers its "
                             "tokens from 0")
        B, T = idx_BT.shape
        if cache is not None and cache.memory_kv:  # continuing a generation: decoder tokens only
            logits_BTV = self.decode(idx_BT, cache.memory_kv, cache.keep_BS, cache.decoder)
        else:
            src_BS, keep_BS, boundary_B = self.split_rows(idx_BT)
            memory_kv = self.memory(src_BS, keep_BS)
            if cache is not None:
                if bool((boundary_B != boundary_B[0]).any()):
                    raise ValueError("encoder_decoder: cached decoding needs every row's source of the same length")
                cache.memory_kv, cache.keep_BS = memory_kv, keep_BS
            start = int(boundary_B.min())
            # the row position of decoder token u: the row's boundary + u
            j_BU = boundary_B[:, None] + torch.arange(T - start, device=idx_BT.device)[None, :]
            inside_BU = j_BU < T
            tgt_BU = idx_BT.gather(1, j_BU.clamp_max(T - 1)).masked_fill(~inside_BU, 0)
            dec_BUV = self.decode(tgt_BU, memory_kv, keep_BS, cache.decoder if cache is not None else None)
            # back to the row positions the decoder tokens came from; source positions predict nothing
            logits_BTV = dec_BUV.new_zeros(B, T, dec_BUV.shape[-1])
            rows_BU = torch.arange(B, device=idx_BT.device)[:, None].expand_as(j_BU)
            logits_BTV[rows_BU[inside_BU], j_BU[inside_BU]] = dec_BUV[inside_BU]
        loss = None if targets_BT is None else cross_entropy(logits_BTV, targets_BT)
        return ModelOutput(loss=loss, logits=logits_BTV)

    @torch.no_grad()
    def attention_scores(self, idx_BT, pos_T=None, data_pos_BT=None) -> list[torch.Tensor]:
        """Per encoder layer, the source's self-attention logits (B, H, S, S), -inf at padding (analysis)."""
        src_BS, keep_BS, _ = self.split_rows(idx_BT)
        pos_S = self.pe.positions(src_BS.shape[1], src_BS.device)
        x_BSD = self.pe.embed(self.tok_emb(src_BS), pos_S)
        out = []
        for layer, block in enumerate(self.encoder):
            pe = self.pe.layer_pe(layer)
            out.append(block.attn.scores(block.attn_norm(x_BSD), pos_S, pe, keep_BS))
            x_BSD = block(x_BSD, pos_S, pe, keep_BS)
        return out

    def attention_probs(self, idx_BT, pos_T=None, data_pos_BT=None) -> list[torch.Tensor]:
        """Per encoder layer, the source's self-attention probabilities (a padded key gets 0)."""
        return [torch.softmax(s, dim=-1).nan_to_num(0.0) for s in self.attention_scores(idx_BT, pos_T, data_pos_BT)]
