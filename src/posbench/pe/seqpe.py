"""SeqPE, sequential position encoding (Li, Liu, Sun, Cai, Cui, Bi, Zhao, Watanabe 2025, arXiv 2506.13277; the
authors' code: ghrua/seqpe, text_seqpe/, read at the commit docs/pe_defaults.md names). A position is its decimal
digits, left-padded to `max_digits` ("123" -> 0 0 1 2 3), read by a small causal transformer (GPT-2 blocks, a
learned embedding per digit and per digit slot, a [CLS] token appended last); its output at [CLS] is the position's
vector p (custom_modules/sequential_pe.py `SequentialPE.forward`). The authors' language-model setting
(text_seqpe/runs/ours_gpt2_wt103.sh: pe_apply_method attn_scalar, use_pe_qk_per_layer single, use_pe_multi_head)
maps p once through one linear layer to a query and a key part, split per head, and adds their dot product to
every layer's logits: a_ij += (Wq p_i + bq)_h . (Wk p_j + bk)_h / sqrt(K)
(models/gpt2/modeling_gpt2.py `GPT2Attention.forward`).
That sum is a dot product over wider heads, so `rotate` appends the PE's parts to q and k (q scaled so the kernels'
1/sqrt(K + P) is the authors' 1/sqrt(K)): every kernel runs it without a bias, and the KV cache keeps it.
Training shifts a batch's positions with probability `random_shift_rate` to one of `shift_starts` starts drawn
once (custom_modules/pe_sampler.py `SeqPeMainTaskPosSampler`), and adds the method's two objectives
(pe/seqpe_objectives.py) through `aux_loss`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posbench.errors import ConfigError
from posbench.pe.encoding import PES, PositionalEncoding
from posbench.pe.seqpe_objectives import ObjectiveConfig, seqpe_objectives
from posbench.pe.speed import PESpeed


def digits(pos: torch.Tensor, n_digits: int) -> torch.Tensor:
    """(..., n_digits) long: each integer position's decimal digits, left-padded with 0
    (custom_modules/pe_utils.py `pos2seq`)."""
    p = pos.long()[..., None]
    place = 10 ** torch.arange(n_digits - 1, -1, -1, device=pos.device)
    return (p // place) % 10


class DigitBlock(nn.Module):
    """One GPT-2 block (pre-LayerNorm, causal attention, gelu_new MLP), as custom_modules/sequential_pe.py's."""

    def __init__(self, E: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(E, eps=1e-5), nn.LayerNorm(E, eps=1e-5)
        self.c_attn, self.c_proj = nn.Linear(E, 3 * E), nn.Linear(E, E)
        self.c_fc, self.mlp_proj = nn.Linear(E, 4 * E), nn.Linear(4 * E, E)
        self.drop = nn.Dropout(dropout)  # resid_pdrop 0.1; attn_pdrop is 0 in the authors' run

    def forward(self, x_NLE):
        N, L, E = x_NLE.shape
        q, k, v = self.c_attn(self.ln_1(x_NLE)).view(N, L, 3, self.heads, E // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(N, L, E)
        x_NLE = x_NLE + self.drop(self.c_proj(a))
        h = F.gelu(self.c_fc(self.ln_2(x_NLE)), approximate="tanh")  # gelu_new
        return x_NLE + self.drop(self.mlp_proj(h))


class ForwardMemo:
    """The positions' vectors of the current forward, made by `embed` and read by every layer's `rotate` for the
    very same positions tensor (the model hands each layer the one `embed` got); any other tensor is encoded anew.
    Not model state: a copy of the model starts with an empty memo."""

    def __init__(self):
        self.pos, self.vectors = None, None

    def keep(self, pos, vectors):
        self.pos, self.vectors = pos, vectors

    def get(self, pos):
        return self.vectors if pos is self.pos else None

    def __deepcopy__(self, memo):
        return ForwardMemo()


@PES.register("seqpe")
class SeqPE(PositionalEncoding):
    kind = "absolute"
    summary = "SeqPE: a position's digits read by a small transformer; its q/k parts add to every layer's logits"

    @dataclass
    class Config(ObjectiveConfig):
        embed_dim: int = 0  # E; 0: model.d_model (the authors assert pe_embed_dim == the model's, 768)
        n_layers: int = 2  # seqpe_layer_num
        n_heads: int = 0  # 0: E // 64, at least 1 (train.py: num_attention_heads = pe_embed_dim // 64)
        dropout: float = 0.1  # seqpe_resid_pdrop
        temperature: float = 1.0  # seqpe_temperature: p / temperature
        scalar_scale: float = 1.0  # seqpe_scalar_scale on the logit term
        random_shift_rate: float = 0.1  # pe_random_shift_rate
        shift_starts: int = 320  # pe_random_shift_downsample

        def check(self) -> None:
            super().check()
            if self.embed_dim < 0 or self.n_heads < 0 or self.n_layers < 1:
                raise ConfigError("pe.embed_dim and pe.n_heads must be >= 0 (0: derived), pe.n_layers >= 1")
            if not (0 <= self.dropout < 1 and 0 <= self.random_shift_rate <= 1):
                raise ConfigError("pe.dropout must be in [0, 1) and pe.random_shift_rate in [0, 1]")
            if self.temperature <= 0 or self.shift_starts < 1:
                raise ConfigError("pe.temperature must be > 0 and pe.shift_starts >= 1")

    @classmethod
    def check_model(cls, cfg, ctx) -> None:
        E = cfg.embed_dim or ctx.d_model
        heads = cfg.n_heads or max(E // 64, 1)
        if E % ctx.n_heads or E % heads:
            raise ConfigError(f"pe.embed_dim={E} must be divisible by model.n_heads={ctx.n_heads} (a part per "
                              f"head) and by pe.n_heads={heads}")
        if cfg.max_position <= ctx.seq_len:
            raise ConfigError(f"pe.max_position={cfg.max_position} must exceed model.seq_len={ctx.seq_len}: "
                              "training shifts positions and samples the objectives up to it")

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        E = cfg.embed_dim or ctx.d_model
        self.n_digits = len(str(cfg.max_position - 1))  # train.py: PeUtils.get_digit_num(pe_max_position)
        self.digit_emb, self.slot_emb = nn.Embedding(10, E), nn.Embedding(self.n_digits, E)
        self.cls = nn.Parameter(torch.zeros(1, 1, E))
        self.blocks = nn.ModuleList(DigitBlock(E, cfg.n_heads or max(E // 64, 1), cfg.dropout)
                                    for _ in range(cfg.n_layers))
        self.ln_f, self.out_proj = nn.LayerNorm(E, eps=1e-5), nn.Linear(E, E)
        self.pe_qk = nn.Linear(E, 2 * E)  # GPT2Model.pe_qk ('single': one for every layer)
        for m in self.modules():  # custom_modules/sequential_pe.py: N(0, 0.02), zero biases, LN 1
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=ctx.init_std)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        nn.init.normal_(self.cls, std=ctx.init_std)
        # the shifted starts, drawn once as the authors' sampler does (a buffer: a resumed run keeps them)
        self.register_buffer("starts", torch.randint(0, cfg.max_position - ctx.seq_len + 1, (cfg.shift_starts,)))
        self._memo = ForwardMemo()

    @property
    def max_positions(self) -> int:
        return 10 ** self.n_digits  # a position with more digits than the encoder has slots cannot be read

    def encode(self, pos: torch.Tensor) -> torch.Tensor:
        """(..., E) float32: the vector p of each integer position (SequentialPE.forward)."""
        d_NL = digits(pos.reshape(-1), self.n_digits)
        x = self.digit_emb(d_NL) + self.slot_emb.weight
        x = torch.cat((x, self.cls.expand(len(x), -1, -1)), dim=1)  # [CLS] last, without a slot embedding
        for block in self.blocks:
            x = block(x)
        p = self.out_proj(self.ln_f(x[:, -1])) / self.cfg.temperature
        return p.float().reshape(*pos.shape, -1)

    def positions(self, T: int, device, offset: int = 0) -> torch.Tensor:
        if self.training and float(torch.rand(())) < self.cfg.random_shift_rate:
            offset += int(self.starts[torch.randint(0, len(self.starts), ())])
        return super().positions(T, device, offset)

    def embed(self, x_BTD, pos_T):
        # nothing is added to the tokens: the positions' vectors are made here, once per forward, for every layer
        self._memo.keep(pos_T, self.encode(pos_T))
        return x_BTD

    def _vectors(self, pos_T):
        vectors = self._memo.get(pos_T)
        return vectors if vectors is not None else self.encode(pos_T)

    def rotate(self, q_BHTK, k_BHTK, pos_T):
        H, K = q_BHTK.shape[1], q_BHTK.shape[-1]
        pq, pk = self.pe_qk(self._vectors(pos_T)).chunk(2, dim=-1)  # (T, E) or (B, T, E) each

        def heads(p):  # (T, E) -> (1, H, T, P); per row (B, T, E) -> (B, H, T, P)
            p = p.unflatten(-1, (H, -1)).transpose(-3, -2)
            return p if p.dim() == 4 else p[None]

        P = pq.shape[-1] // H
        fix = math.sqrt((K + P) / K)  # the kernels scale by 1/sqrt(K + P); the authors' logits by 1/sqrt(K)
        pq, pk = heads(pq) * self.cfg.scalar_scale, heads(pk)
        B, _, T, _ = q_BHTK.shape
        q = torch.cat((q_BHTK.float(), pq.expand(B, -1, T, -1)), dim=-1) * fix
        k = torch.cat((k_BHTK.float(), pk.expand(B, -1, T, -1)), dim=-1)
        return q.to(q_BHTK.dtype), k.to(k_BHTK.dtype)

    def aux_loss(self, pos_T: torch.Tensor) -> torch.Tensor | None:
        return seqpe_objectives(self, self.cfg, self.ctx, pos_T, self._memo.get(pos_T))


    class Speed(PESpeed):
        def qk_dim(self, head_dim: int) -> int:
            return head_dim + self.pe.pe_qk.out_features // (2 * self.pe.ctx.n_heads)

        def layer_flops(self, layer: int, seq_len: int) -> tuple[float, float]:
            # q.k over K + P channels: 2 * T * H * P more per token; the digit encoder runs once per forward, not
            # per layer (counted in layer 0): per position n_layers blocks over n_digits + 1 tokens, ~24 E^2 each
            pe = self.pe
            H, P, E = pe.ctx.n_heads, self.qk_dim(pe.ctx.head_dim) - pe.ctx.head_dim, pe.pe_qk.in_features
            extra = 2.0 * seq_len * H * P + (24.0 * E * E * (pe.n_digits + 1) * pe.cfg.n_layers if layer == 0 else 0)
            return extra, 3 * extra
