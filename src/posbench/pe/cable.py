"""CABLE, Context-aware Biases for Length Extrapolation (Veisi et al. 2025, arXiv 2503.08067): no positional
encoding; per layer and head a learned, token-specific bias h_t = w^T x_t + b from the layer's attention input,
accumulated over the distance between key and query:

    B_ij = z_i - z_j = -sum_{t=j+1}^{i} softplus(h_t),   z = cumsum(-softplus(h))

added to the logit of query i and key j (authors' code, axiomlab/Cable `src/Cable.py`: `h_attn =
nn.Linear(n_embd, n_head)` line 19, `b = cumsum(-softplus(h_attn(x)))` line 39, `Bias = b_i - b_j` line 47). It is
FoX's bias with log f_t = -softplus(h_t) in place of log sigmoid(h_t) = -softplus(-h_t): every term is <= 0, so the
bias never grows with distance; the same Linear(d_model, n_heads) with a bias, weight ~ N(0, 0.02), bias 0
(`_init_weights`, lines 119-126), weight decayed and bias not (`configure_optimizers`: tensors of dim >= 2, line
207). So everything but the gate is FoX's (pe/fox.py): its token features in the KV cache, its score_mod, FLOPs.
"""

from __future__ import annotations

import torch.nn.functional as F

from posbench.pe.encoding import PES
from posbench.pe.fox import ForgetGate


@PES.register("cable")
class Cable(ForgetGate):
    summary = "CABLE: learned per-token, per-head biases -softplus(w.x_t + b) summed key to query (Veisi et al. 2025)"

    @staticmethod
    def log_gate(logit_BTH):
        return -F.softplus(logit_BTH)
