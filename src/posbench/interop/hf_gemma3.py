"""A posbench decoder built with the gemma3 recipe (configs/recipe/gemma3.yaml) beside transformers'
`Gemma3ForCausalLM`: its config and its weights, for the parity test of the attention recipe.

What maps one to one: the 5:1 local/global layer pattern (model.attention_window's cycle = layer_types, its window
= sliding_window), the per-layer RoPE (pe.pattern's members: the local base = rope_parameters' sliding_attention
theta, the global one with pi scaling = full_attention's linear scaling), embeddings times sqrt(d_model)
(model.embed_scale=sqrt_d), QK-norm, the attention scale 1/sqrt(head dim) (query_pre_attn_scalar = head dim), the
tied head. Gemma's RMSNorms scale by (1 + w) where posbench's scale by w: w_hf = w - 1. What does not: Gemma 3's
sandwich norms (post_attention_layernorm, post_feedforward_layernorm, an RMSNorm on each branch's output) have no
posbench twin, and its GeGLU is posbench's SwiGLU only with hidden_activation=silu; the test sets silu and replaces
the two sandwich norms by the identity in the reference. A gemma3-recipe checkpoint exports with posbench's remote
code (hybrid PEs and sliding windows are there), not as Gemma3ForCausalLM.
"""

from __future__ import annotations

import torch

from posbench.errors import ConfigError
from posbench.interop.hf_weights import decoder_state_dict, plus_one_norm, qk_norm_decoder_layer


def gemma3_config(model_cfg, pe_cfg):
    from transformers import Gemma3TextConfig

    m = model_cfg
    windows = m.attention_window if isinstance(m.attention_window, list) else None
    pattern = getattr(pe_cfg, "pattern", None)
    if not (windows and pattern and len(windows) == len(pattern) == 6 and windows[-1] is None
            and len({w for w in windows[:-1]}) == 1 and len({(p.theta, p.scaling.name) for p in pattern[:-1]}) == 1
            and pattern[-1].scaling.name in ("none", "pi") and m.n_layers % 6 == 0):
        raise ConfigError("Gemma 3's pattern is 5 windowed layers of one RoPE, then a full one (pi scaling or none), "
                          "over a multiple of 6 layers; the model differs")
    local, glob = pattern[0], pattern[-1]
    full = ({"rope_type": "linear", "factor": float(glob.scaling.factor)} if glob.scaling.name == "pi"
            else {"rope_type": "default"})
    head_dim = m.d_model // m.n_heads
    return Gemma3TextConfig(
        vocab_size=m.vocab_size, hidden_size=m.d_model, intermediate_size=m.d_ff, num_hidden_layers=m.n_layers,
        num_attention_heads=m.n_heads, num_key_value_heads=m.n_heads, head_dim=head_dim, hidden_activation="silu",
        max_position_embeddings=m.seq_len, rms_norm_eps=m.norm_eps, tie_word_embeddings=m.tie_embeddings,
        query_pre_attn_scalar=head_dim, sliding_window=windows[0], pad_token_id=None,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": float(local.theta)},
                         "full_attention": {**full, "rope_theta": float(glob.theta)}})


def gemma3_state_dict(state: dict[str, torch.Tensor], n_layers: int, tied: bool) -> dict[str, torch.Tensor]:
    """posbench parameter names -> Gemma3ForCausalLM's (norms as w - 1); the sandwich norms have no source."""
    norm = plus_one_norm

    def layer(state, p, wq, wk, wv):
        return qk_norm_decoder_layer(state, p, norm, wq, wk, wv, "pre_feedforward_layernorm.weight")
    return decoder_state_dict(state, n_layers, tied, layer, norm)
