"""A posbench decoder built with the qwen3_next recipe (configs/recipe/qwen3_next.yaml) as transformers'
`Qwen3NextForCausalLM`: its config and its weights, one to one.

What maps: Qwen3-Next's gated attention (q_proj emits each head's query and its elementwise gate side by side:
rows [q_h; g_h] per head h) is posbench's `model.attention_gate=elementwise` (attn.gate.proj); its partial rotary
(`partial_rotary_factor`) is `pe.rotary_fraction`; its RMSNorms scale by (1 + w) where posbench's scale by w, so
w_hf = w - 1 (every norm: block, final, q and k). Qwen3-Next's other layer kinds have no posbench twin and are
configured away: every layer is `full_attention` (no Gated DeltaNet), `num_experts=0` (a dense SwiGLU MLP, no
mixture of experts), one key-value head per query head (no grouped queries).
"""

from __future__ import annotations

import torch

from posbench.errors import ConfigError
from posbench.interop.hf_weights import decoder_state_dict, plus_one_norm, qk_norm_decoder_layer


def qwen3_next_reason(model_cfg, pe_cfg) -> str | None:
    """None when the model maps one to one onto Qwen3NextForCausalLM, else why not."""
    m = model_cfg
    if m.attention_gate != "elementwise":
        return f"model.attention_gate={m.attention_gate}: Qwen3-Next gates every channel (elementwise)"
    if m.attention_sinks:
        return "model.attention_sinks=true: Qwen3-Next's softmax has no sink"
    if not m.qk_norm_weight or m.qk_norm_layers != "all":
        return "a weightless or partial QK-norm: Qwen3-Next's q and k norms are weighted, on every layer"
    if m.attention_chunk is not None:
        return f"model.attention_chunk={m.attention_chunk}: Qwen3-Next has no chunked attention"
    if m.attention_temperature.name != "none":
        return f"model.attention_temperature={m.attention_temperature.name}: Qwen3-Next's logits have no temperature"
    if pe_cfg.name != "rope":
        return f"PE `{pe_cfg.name}`: Qwen3-Next rotates with (partial) RoPE"
    if pe_cfg.scaling.name != "none":
        return f"RoPE scaling `{pe_cfg.scaling.name}`: the mapping covers unscaled (partial) RoPE"
    if not m.qk_norm or m.embed_scale != "none" or m.packing.active or m.attention_window is not None:
        return ("no QK-norm, scaled embeddings, document packing or a sliding window have no counterpart in "
                "Qwen3-Next's full-attention layers")
    if type(m.arch).__name__ != "DecoderArch":
        return f"model.arch={m.arch.name} is not a decoder"
    return None


def qwen3_next_config(model_cfg, pe_cfg, **extra):
    """transformers' Qwen3NextConfig of the same model: all layers full attention, dense MLPs."""
    from transformers import Qwen3NextConfig

    reason = qwen3_next_reason(model_cfg, pe_cfg)
    if reason:
        raise ConfigError(f"the model does not map onto Qwen3NextForCausalLM: {reason}")
    m = model_cfg
    return Qwen3NextConfig(
        vocab_size=m.vocab_size, hidden_size=m.d_model, intermediate_size=m.d_ff, num_hidden_layers=m.n_layers,
        num_attention_heads=m.n_heads, num_key_value_heads=m.n_heads, head_dim=m.d_model // m.n_heads,
        hidden_act="silu", max_position_embeddings=m.seq_len, rms_norm_eps=m.norm_eps,
        tie_word_embeddings=m.tie_embeddings, attention_bias=False, attention_dropout=0.0,
        rope_parameters={"rope_type": "default", "rope_theta": float(pe_cfg.theta),
                         "partial_rotary_factor": float(pe_cfg.rotary_fraction)},
        layer_types=["full_attention"] * m.n_layers, num_experts=0, mlp_only_layers=list(range(m.n_layers)),
        **extra)


def qwen3_next_state_dict(state: dict[str, torch.Tensor], n_layers: int, n_heads: int,
                          tied: bool) -> dict[str, torch.Tensor]:
    """posbench parameter names -> Qwen3NextForCausalLM's (q and its gate interleaved per head, norms as w - 1)."""
    norm = plus_one_norm

    def layer(state, p, wq, wk, wv):
        D = wq.shape[1]
        wg = state[p + "attn.gate.proj.weight"]
        q_and_gate = torch.cat((wq.view(n_heads, -1, D), wg.view(n_heads, -1, D)), dim=1).reshape(-1, D)
        return qk_norm_decoder_layer(state, p, norm, q_and_gate, wk, wv, "post_attention_layernorm.weight")
    return decoder_state_dict(state, n_layers, tied, layer, norm)
