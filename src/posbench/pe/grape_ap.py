"""GRAPE-AP, path-integral additive GRAPE (Group Representational Position Encoding, ICLR 2026, arXiv 2512.07805,
section 5; the row of their experiments, Table 1): the logit bias of query t on key j sums an edge potential over
the tokens between them,

    b(t, j) = sum_{l=j+1}^{t} m_h log sigmoid(p_t . R(-l) p^_l / d_p),   p = W_p x,   p^ = rms_norm(p)

with m_h ALiBi's slopes and R(-l) every plane of p^ turned by -l radians (a rotary of base 1), so each row is a
forgetting rate that query t sets for every token after the key. GRAPE-A (pe/grape_a.py) is the case whose
potentials do not depend on t.

Facts from the authors' code (model-architectures/GRAPE, commit f5b539f, model/llama-mha-grape-ap-v1.py): W_p a
Linear(d_model, H*d_p) without bias (line 117), d_p = 8 (`p_head_dim` in their two pdim8 configs of GRAPE-AP),
untied from q, k, v (`p_tie_mode` 'none'); p^ = F.rms_norm(p) without weight (line 171); the
rotary of base 1 on p^ with positions 0..T-1 (lines 126-128, 19-36) turning by -angle (x1 cos + x2 sin, lines
38-45); the query side unrotated and unnormalised, the scale 1 / d_p (line 178); slopes (lines 47-61, 131); the
masked sum sum - cumsum (lines 179-185). W_p ~ N(0, 0.5 / sqrt(d_model)), as every matrix of their init
(model/init_utils.py, `hidden_init_std_factor` 0.5). Weight decay on W_p: their optimizer decays every parameter but
RMSNorm weights (optim_utils.py lines 8-30).

The bias reads whole rows (a sum over the keys between), which no elementwise score_mod can express: it is a
`logits_mod`, eager kernel only. l is the token's index in the sequence (the S tokens the call sees, cached ones
first), as the authors' positions 0..T-1; under model.packing.mask=document it restarts at each document start the
call sees (pe/path.py `segments`, as PaTH's convolution; a start already in the KV cache is not seen again, and
a model.attention_chunk start restarts it too).
Shape legend: B batch, H heads, T queries (the last T of the S keys), S keys, d_p = E channels, L layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posbench.errors import ConfigError
from posbench.pe.alibi import alibi_slopes
from posbench.pe.encoding import PES, PEConfig, PositionalEncoding
from posbench.pe.path import segments
from posbench.pe.speed import PESpeed
from posbench.pe.token_rotation import rotate_pairs


@PES.register("grape_ap")
class GrapeAP(PositionalEncoding):
    kind = "context"
    summary = "GRAPE-AP path-integral: bias sums log sigmoid edge potentials of the tokens between key and query " \
              "(GRAPE, ICLR 2026; eager only)"

    @dataclass
    class Config(PEConfig):
        p_dim: int = 8  # channels of the positional projection per head (the authors' p_head_dim)

        def check(self) -> None:
            if self.p_dim < 2 or self.p_dim % 2:
                raise ConfigError(f"pe.p_dim must be an even integer >= 2 (planes turn), got {self.p_dim}")

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.p_LWD = nn.Parameter(torch.randn(ctx.n_layers, ctx.n_heads * cfg.p_dim, ctx.d_model)
                                  * (0.5 / math.sqrt(ctx.d_model)))
        self.register_buffer("slopes_H", alibi_slopes(ctx.n_heads), persistent=False)

    def decay_params(self):
        return [self.p_LWD]

    def token_features(self, layer, x_BTD):
        """(B, H, d_p, T) float32: each token's p = W_p x."""
        B, T, _ = x_BTD.shape
        p_BTW = x_BTD.float() @ self.p_LWD[layer].float().t()
        return p_BTW.view(B, T, self.ctx.n_heads, self.cfg.p_dim).permute(0, 2, 3, 1)

    def potentials(self, feats_BHES, s_BHTS):
        """(B, H, T, S) m_h log sigmoid(p_t . R(-l) p^_l / d_p) for keys l <= t, 0 after the query."""
        T = s_BHTS.shape[-2]
        p_BHSE = feats_BHES.float().transpose(-1, -2)
        S, E = p_BHSE.shape[-2:]
        l_BS = token_index(s_BHTS).float()
        key_BHSE = rotate_pairs(F.rms_norm(p_BHSE, (E,)), -l_BS[:, None, :, None].expand(-1, 1, S, E // 2))
        psi = F.logsigmoid(p_BHSE[:, :, S - T:] @ key_BHSE.transpose(-1, -2) / E)
        idx_S = torch.arange(S, device=p_BHSE.device)
        causal_TS = idx_S <= (S - T + torch.arange(T, device=p_BHSE.device))[:, None]
        return psi * causal_TS * self.slopes_H.float()[:, None, None]

    def logits_mod(self, layer, q_BHTK, s_BHTS, k_BHSK=None, feats_BHS=None):
        with torch.autocast(q_BHTK.device.type, enabled=False):
            psi_BHTS = self.potentials(feats_BHS, s_BHTS)
            return s_BHTS + (psi_BHTS.sum(-1, keepdim=True) - psi_BHTS.cumsum(-1))  # masked keys stay -inf


    class Speed(PESpeed):
        def logits_mod_bytes(self, B, H, T, S):
            # float32: p . p^ and its log sigmoid, the causal product, then the cumulative sum, the difference and the
            # result, three (T, S) at once; the (S, d_p) keys and the (T, S) mask beside them
            return 4 * B * H * (3 * T * S + 4 * S * self.pe.cfg.p_dim) + 4 * T * S

        def layer_flops(self, layer, seq_len):
            # per token the projection (2 D H d_p), per head the key's norm and turn (~8 d_p); per head and key the
            # potential p.p^ (2 d_p), log sigmoid, the mask and slope, the sum, cumulative sum and difference (~6)
            H, E, D = self.pe.ctx.n_heads, self.pe.cfg.p_dim, self.pe.ctx.d_model
            forward = 2 * D * H * E + 8 * H * E + H * seq_len * (2 * E + 6)
            return forward, 3 * forward


def token_index(s_BHTS) -> torch.Tensor:
    """(B, S) each token's index in its segment (pe/path.py `segments`: a document start seen in this call under
    model.packing.mask=document begins one), so l restarts with each document as the authors' positions do per
    sequence."""
    seg_BS = segments(s_BHTS)
    S = seg_BS.shape[-1]
    idx_S = torch.arange(S, device=seg_BS.device)
    start_BS = seg_BS != F.pad(seg_BS, (1, 0), value=-1)[:, :S]
    return idx_S - torch.cummax(torch.where(start_BS, idx_S, 0), dim=-1).values
