"""The Qwen3 path of the export (no remote code): a RoPE or NoPE checkpoint as a standard `Qwen3ForCausalLM`.

posbench's decoder is Qwen3's architecture (RMSNorm, SwiGLU, per-head QK RMSNorm before half-split RoPE, tied
embeddings, no biases), so such a checkpoint becomes Qwen3 by renaming weights. RoPE scaling maps to transformers'
`rope_parameters` only where the formulas are the same (none; pi = `linear`; yarn, computed as transformers does,
docs/pe_defaults.md). NoPE is Qwen3 with `linear` scaling by 1e30: every angle is below 1e-25 rad, no rotation in
fp32. Which checkpoints take this path: hf_refusals.qwen3_reason.
"""

from __future__ import annotations

import torch

from posbench.config import RunConfig
from posbench.data.tokenizers import Tokenizer
from posbench.errors import ConfigError

QWEN3 = "Qwen3ForCausalLM"
NOPE_FACTOR = 1e30  # linear RoPE scaling that makes every angle vanish (see the module docstring)


def position_free(run_cfg: RunConfig) -> bool:
    """The model computes without positions: NoPE, or DroPE after its drop (`pe.dropped`: the same weights
    recalibrated as NoPE, pe/drope.py), which is then a standard Qwen3 directory like NoPE, not remote code."""
    return run_cfg.pe.name == "none" or getattr(run_cfg.pe, "dropped", False)


def rope_parameters(run_cfg: RunConfig) -> dict:
    """transformers' rope_parameters for the checkpoint's PE; ConfigError when Qwen3 cannot express it."""
    pe = run_cfg.pe
    if position_free(run_cfg):
        return {"rope_type": "linear", "rope_theta": 10000.0, "factor": NOPE_FACTOR}
    if pe.name != "rope":
        raise ConfigError(f"PE `{pe.name}` has no architecture in transformers (only RoPE and NoPE map onto "
                          "Qwen3)")
    if pe.rotary_fraction != 1.0:
        raise ConfigError(f"pe.rotary_fraction={pe.rotary_fraction}: Qwen3 rotates every channel of a head")
    scaling = pe.scaling
    base = {"rope_theta": float(pe.theta)}
    if scaling.name == "none":
        return {"rope_type": "default", **base}
    if scaling.name == "pi":
        return {"rope_type": "linear", "factor": float(scaling.factor), **base}
    if scaling.name == "yarn":
        return {"rope_type": "yarn", "factor": float(scaling.factor), "beta_fast": float(scaling.beta_fast),
                "beta_slow": float(scaling.beta_slow),
                "original_max_position_embeddings": scaling.original_max_positions or run_cfg.model.seq_len, **base}
    raise ConfigError(f"RoPE scaling `{scaling.name}` computes other frequencies than any of transformers' "
                      "rope types; export the checkpoint without it (pe.scaling.name=none) or with pi/yarn")


def hf_state_dict(state: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """posbench parameter names -> Qwen3ForCausalLM's (qkv split into q, k, v; the tied head left out)."""
    out = {"model.embed_tokens.weight": state["tok_emb.weight"], "model.norm.weight": state["norm.weight"]}
    for i in range(n_layers):
        p, q = f"blocks.{i}.", f"model.layers.{i}."
        wq, wk, wv = state[p + "attn.qkv.weight"].chunk(3, dim=0)  # rows: [q heads; k heads; v heads]
        out.update({
            q + "input_layernorm.weight": state[p + "attn_norm.weight"],
            q + "self_attn.q_proj.weight": wq, q + "self_attn.k_proj.weight": wk, q + "self_attn.v_proj.weight": wv,
            q + "self_attn.o_proj.weight": state[p + "attn.proj.weight"],
            q + "self_attn.q_norm.weight": state[p + "attn.q_norm.weight"],
            q + "self_attn.k_norm.weight": state[p + "attn.k_norm.weight"],
            q + "post_attention_layernorm.weight": state[p + "mlp_norm.weight"],
            q + "mlp.gate_proj.weight": state[p + "mlp.gate.weight"],
            q + "mlp.up_proj.weight": state[p + "mlp.up.weight"],
            q + "mlp.down_proj.weight": state[p + "mlp.down.weight"],
        })
    return {k: v.detach().to(torch.float32).contiguous().clone() for k, v in out.items()}


def qwen3_config(run_cfg: RunConfig, tokenizer: Tokenizer):
    from transformers import Qwen3Config

    m = run_cfg.model
    return Qwen3Config(vocab_size=m.vocab_size, hidden_size=m.d_model, intermediate_size=m.d_ff,
                       num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads, num_key_value_heads=m.n_heads,
                       head_dim=m.head_dim, hidden_act="silu", max_position_embeddings=m.seq_len,
                       rms_norm_eps=m.norm_eps, tie_word_embeddings=True, rope_parameters=rope_parameters(run_cfg),
                       attention_bias=False, attention_dropout=0.0, use_sliding_window=False,
                       bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.bos_id,
                       architectures=[QWEN3])
