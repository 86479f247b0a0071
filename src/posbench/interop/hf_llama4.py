"""A posbench decoder built with the llama4_irope recipe (configs/recipe/llama4_irope.yaml) beside transformers'
`Llama4ForCausalLM`: its config and its weights, for the parity test of the recipe.

What maps one to one: the NoPE-every-k pattern (pe.pattern's none members = no_rope_layers' zeros), RoPE's base,
chunked local attention on the RoPE layers (model.attention_chunk = attention_chunk_size), the attention temperature
of the NoPE layers (model.attention_temperature llama4: floor_scale, scale = attn_temperature_tuning, floor_scale,
attn_scale), dense SwiGLU MLPs (moe_layers [] with intermediate_size_mlp), the norms, the tied head. Llama 4 rotates
interleaved channel pairs (2i, 2i + 1) where posbench rotates halves (i, i + K/2): each head's q and k rows are
permuted to match, which leaves q . k unchanged on every layer. The L2 QK-norm (use_qk_norm: weightless, after
RoPE, on the RoPE layers only) is model.qk_norm_weight=false with model.qk_norm_layers=positional: posbench
normalises before RoPE, which equals normalising after it because RoPE keeps each head's RMS. What does not map: the
mixture of experts. A llama4_irope-recipe checkpoint exports with posbench's remote code, not as Llama4ForCausalLM.
"""

from __future__ import annotations

import torch

from posbench.errors import ConfigError
from posbench.interop.hf_weights import decoder_state_dict


def llama4_config(model_cfg, pe_cfg):
    from transformers import Llama4TextConfig

    m, t = model_cfg, model_cfg.attention_temperature
    pattern = getattr(pe_cfg, "pattern", None)
    l2_norm = m.qk_norm and not m.qk_norm_weight and m.qk_norm_layers == "positional"
    if not (pattern and t.name == "llama4" and t.nope_layers_only and (l2_norm or not m.qk_norm)
            and all(p.name in ("rope", "none") for p in pattern) and m.n_layers % len(pattern) == 0
            and len({p.theta for p in pattern if p.name == "rope"}) == 1
            and all(p.scaling.name == "none" and p.rotary_fraction == 1 for p in pattern if p.name == "rope")):
        raise ConfigError("Llama 4's recipe is a pattern of plain RoPE (one base) and NoPE layers, the llama4 "
                          "temperature on the NoPE layers and a weightless QK-norm on the RoPE layers or none; the "
                          "model differs")
    theta = next(p.theta for p in pattern if p.name == "rope")
    rope_layers = [pattern[i % len(pattern)].name == "rope" for i in range(m.n_layers)]
    chunks = {m.layer_chunk(i) for i, rope in enumerate(rope_layers) if rope}
    if len(chunks) != 1 or any(m.layer_chunk(i) is not None for i, rope in enumerate(rope_layers) if not rope):
        raise ConfigError("Llama 4 chunks the keys of every RoPE layer alike and of no NoPE layer; "
                          f"model.attention_chunk={m.attention_chunk} differs")
    return Llama4TextConfig(
        vocab_size=m.vocab_size, hidden_size=m.d_model, intermediate_size=m.d_ff, intermediate_size_mlp=m.d_ff,
        num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads, num_key_value_heads=m.n_heads,
        head_dim=m.d_model // m.n_heads, max_position_embeddings=m.seq_len, rms_norm_eps=m.norm_eps,
        tie_word_embeddings=m.tie_embeddings, rope_parameters={"rope_type": "default", "rope_theta": float(theta)},
        moe_layers=[], no_rope_layers=[int(rope) for rope in rope_layers], attention_chunk_size=chunks.pop(),
        use_qk_norm=l2_norm, attn_temperature_tuning=True,
        floor_scale=t.floor_scale, attn_scale=t.scale, pad_token_id=None)


def interleave_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Each head's rows from posbench's half layout (i pairs with i + K/2) to the interleaved one (2i with 2i + 1)."""
    D = w.shape[1]
    K = w.shape[0] // n_heads
    half = torch.arange(K // 2)
    perm = torch.stack((half, half + K // 2), dim=-1).flatten()
    return w.view(n_heads, K, D)[:, perm].reshape(n_heads * K, D)


def llama4_state_dict(state: dict[str, torch.Tensor], n_layers: int, n_heads: int,
                      tied: bool) -> dict[str, torch.Tensor]:
    def layer(state, p, wq, wk, wv):
        return {
            "input_layernorm.weight": state[p + "attn_norm.weight"],
            "self_attn.q_proj.weight": interleave_rows(wq, n_heads),
            "self_attn.k_proj.weight": interleave_rows(wk, n_heads),
            "self_attn.v_proj.weight": wv, "self_attn.o_proj.weight": state[p + "attn.proj.weight"],
            "post_attention_layernorm.weight": state[p + "mlp_norm.weight"],
            "feed_forward.gate_proj.weight": state[p + "mlp.gate.weight"],
            "feed_forward.up_proj.weight": state[p + "mlp.up.weight"],
            "feed_forward.down_proj.weight": state[p + "mlp.down.weight"],
        }
    return decoder_state_dict(state, n_layers, tied, layer)
