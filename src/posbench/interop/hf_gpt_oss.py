"""A posbench decoder built with the gpt_oss recipe (configs/recipe/gpt_oss.yaml) beside transformers'
`GptOssForCausalLM`: its config and its weights, for the parity test of the attention recipe.

What maps one to one: the attention (q, k, v and o projections without biases, no QK-norm, one key-value head per
query head), the per-head sinks (attn.sinks = self_attn.sinks), the alternating sliding-window and full layers
(model.attention_window [W, null] = layer_types sliding/full, sliding_window W), RoPE with YaRN (rope_parameters
yarn, its factor, betas, truncate and original length), the norms (RMSNorm scaling by w in both). The MLP maps
too, by choosing gpt-oss's free settings: its mixture of experts is a clamped GLU (gate * sigmoid(alpha gate), times
up + 1, both clamped at swiglu_limit, with biases); with one expert (always routed, weight 1), swiglu_alpha 1, a
swiglu_limit no activation reaches and an up-projection bias of -1 it computes silu(gate) * up, posbench's SwiGLU,
exactly. So a gpt_oss-recipe checkpoint exports as transformers' own GptOssForCausalLM (`gpt_oss_export`, checked
in memory on random ids first; anything the map misses falls back to posbench's remote code).
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


UNREACHED_LIMIT = 1e30  # swiglu_limit: no activation of a trained model comes near it, so the clamps never act


def gpt_oss_native_config(model_cfg, pe_cfg, **extra):
    """gpt_oss_config with the GLU turned into SwiGLU: swiglu_alpha 1, an unreachable limit (the state dict sets
    the up-projection's bias to -1)."""
    cfg = gpt_oss_config(model_cfg, pe_cfg)
    cfg.swiglu_alpha, cfg.swiglu_limit = 1.0, UNREACHED_LIMIT
    for key, value in extra.items():
        setattr(cfg, key, value)
    return cfg


def gpt_oss_state_dict(state: dict[str, torch.Tensor], n_layers: int, tied: bool) -> dict[str, torch.Tensor]:
    """posbench parameter names -> GptOssForCausalLM's, MLPs included: one expert whose gate_up columns interleave
    posbench's gate and up rows (gpt-oss reads gate = [..., ::2], up = [..., 1::2]), up bias -1 (gpt-oss adds 1),
    a zero router (one expert: weight 1 whatever its logit)."""
    out = gpt_oss_attention_state_dict(state, n_layers, tied)
    for i in range(n_layers):
        p, q = f"blocks.{i}.mlp.", f"model.layers.{i}.mlp."
        gate, up, down = (state[p + n + ".weight"].float() for n in ("gate", "up", "down"))
        d_ff, d_model = gate.shape
        gate_up = torch.empty(d_model, 2 * d_ff)
        gate_up[:, 0::2], gate_up[:, 1::2] = gate.T, up.T
        bias = torch.zeros(2 * d_ff)
        bias[1::2] = -1.0
        out.update({q + "experts.gate_up_proj": gate_up[None].contiguous(), q + "experts.gate_up_proj_bias": bias[None],
                    q + "experts.down_proj": down.T[None].contiguous(),
                    q + "experts.down_proj_bias": torch.zeros(1, d_model),
                    q + "router.weight": torch.zeros(1, d_model), q + "router.bias": torch.zeros(1)})
    return out


def gpt_oss_export(run_cfg, model, tolerance: float, **config_extra):
    """(GptOssConfig, state dict) when the checkpoint is exactly a GptOssForCausalLM: the recipe's attention, the
    default packing (gpt-oss has no documents within a row), and logits on random ids within `tolerance` of the
    largest in memory (so a setting the map misses is caught before any file is written); else None."""
    from transformers import GptOssForCausalLM

    if run_cfg.pe.name != "rope" or not run_cfg.model.packing.is_default:
        return None
    try:
        config = gpt_oss_native_config(run_cfg.model, run_cfg.pe, **config_extra)
    except ConfigError:
        return None
    state = gpt_oss_state_dict(model.state_dict(), run_cfg.model.n_layers, run_cfg.model.tie_embeddings)
    reference = GptOssForCausalLM(config).eval()
    loaded = reference.load_state_dict(state, strict=False)
    head = {"lm_head.weight"} if run_cfg.model.tie_embeddings else set()  # tied: the head is the embedding
    if loaded.unexpected_keys or set(loaded.missing_keys) - head:
        return None
    ids = torch.randint(0, run_cfg.model.vocab_size, (2, min(run_cfg.model.seq_len, 48)),
                        generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = model(ids).logits.float(), reference(ids).logits.float()
    if not (got - want).abs().max() <= tolerance * want.abs().max():
        return None
    return config, state


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
