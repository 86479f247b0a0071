"""A posbench decoder built with the gpt_oss recipe (configs/recipe/gpt_oss.yaml) beside transformers'
`GptOssForCausalLM`: its config and its weights, for the parity test of the attention recipe.

What maps one to one: the attention (q, k, v and o projections without biases, no QK-norm, one key-value head per
query head), the per-head sinks (attn.sinks = self_attn.sinks), the alternating sliding-window and full layers
(model.attention_window [W, null] = layer_types sliding/full, sliding_window W), RoPE with YaRN (rope_parameters
yarn, its factor, betas, truncate and original length), the norms (RMSNorm scaling by w in both). What does not:
gpt-oss's MLP is a mixture of experts whose experts are a clamped GLU (gate * sigmoid(1.702 gate), times up + 1,
both clamped at 7, with biases), which no posbench MLP computes; even one expert chosen top-1 is not a SwiGLU. So
no posbench checkpoint is a GptOssForCausalLM: a gpt_oss-recipe checkpoint exports with posbench's remote code; the
parity test swaps each reference layer's MLP for posbench's SwiGLU and compares the rest.
"""

from __future__ import annotations

import torch

from posbench.errors import ConfigError
from posbench.interop.hf_weights import decoder_state_dict


def gpt_oss_config(model_cfg, pe_cfg):
    """transformers' GptOssConfig of the model's attention recipe: 1 expert, top-1 (the MLP is swapped by the
    test), no attention biases."""
    from transformers import GptOssConfig

    m, s = model_cfg, pe_cfg.scaling
    windows = m.attention_window if isinstance(m.attention_window, list) else None
    if not (m.attention_sinks and not m.qk_norm and pe_cfg.name == "rope" and s.name == "yarn" and windows
            and len(windows) == 2 and windows[0] is not None and windows[1] is None):
        raise ConfigError("gpt-oss's attention is sinks, no QK-norm, RoPE with YaRN and model.attention_window "
                          "[W, null]; the model differs")
    return GptOssConfig(
        vocab_size=m.vocab_size, hidden_size=m.d_model, intermediate_size=m.d_ff, num_hidden_layers=m.n_layers,
        num_attention_heads=m.n_heads, num_key_value_heads=m.n_heads, head_dim=m.d_model // m.n_heads,
        sliding_window=windows[0], max_position_embeddings=m.seq_len, rms_norm_eps=m.norm_eps,
        tie_word_embeddings=m.tie_embeddings, attention_bias=False, num_local_experts=1, num_experts_per_tok=1,
        layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(m.n_layers)],
        rope_parameters={"rope_type": "yarn", "rope_theta": float(pe_cfg.theta), "factor": float(s.factor),
                         "beta_fast": float(s.beta_fast), "beta_slow": float(s.beta_slow), "truncate": s.truncate,
                         "original_max_position_embeddings": s.original_max_positions or m.seq_len})


def gpt_oss_attention_state_dict(state: dict[str, torch.Tensor], n_layers: int, tied: bool) -> dict[str, torch.Tensor]:
    """posbench parameter names -> GptOssForCausalLM's, every weight but the MLPs'."""
    def layer(state, p, wq, wk, wv):
        return {
            "input_layernorm.weight": state[p + "attn_norm.weight"],
            "self_attn.q_proj.weight": wq, "self_attn.k_proj.weight": wk, "self_attn.v_proj.weight": wv,
            "self_attn.o_proj.weight": state[p + "attn.proj.weight"], "self_attn.sinks": state[p + "attn.sinks"],
            "post_attention_layernorm.weight": state[p + "mlp_norm.weight"],
        }
    return decoder_state_dict(state, n_layers, tied, layer)
