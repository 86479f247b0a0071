"""posbench's decoder weights under a transformers decoder's names: the parts every decoder shares (embedding,
final norm, an untied head, each layer's fused qkv split into q, k, v) in one place; each architecture's module
says only what its layers call their weights (`layer`) and how it stores a norm's gain (`norm`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

Tensors = dict[str, torch.Tensor]
# layer(state, "blocks.{i}.", wq, wk, wv) -> that layer's weights under the architecture's names, without the
# "model.layers.{i}." prefix
LayerMap = Callable[[Tensors, str, torch.Tensor, torch.Tensor, torch.Tensor], Tensors]


def decoder_state_dict(state: Tensors, n_layers: int, tied: bool, layer: LayerMap,
                       norm: Callable[[torch.Tensor], torch.Tensor] = lambda w: w) -> Tensors:
    """float32 copies (a saved file shares no storage with the model) under "model.*" and "lm_head.weight" (only
    when the head is not the embedding)."""
    out = {"model.embed_tokens.weight": state["tok_emb.weight"], "model.norm.weight": norm(state["norm.weight"])}
    if not tied:
        out["lm_head.weight"] = state["lm_head.weight"]
    for i in range(n_layers):
        p = f"blocks.{i}."
        wq, wk, wv = state[p + "attn.qkv.weight"].chunk(3, dim=0)  # rows: [q heads; k heads; v heads]
        out.update({f"model.layers.{i}.{k}": v for k, v in layer(state, p, wq, wk, wv).items()})
    return {k: v.detach().to(torch.float32).contiguous().clone() for k, v in out.items()}


def plus_one_norm(w: torch.Tensor) -> torch.Tensor:
    """A gain stored as w - 1 (Gemma's and Qwen3-Next's RMSNorm multiply by 1 + weight)."""
    return w - 1.0


def qk_norm_decoder_layer(state: Tensors, p: str, norm: Callable, wq, wk, wv, mlp_norm: str) -> Tensors:
    """One layer of the QK-normed decoders (Gemma 3, Qwen3-Next) in transformers' names; `mlp_norm`: what the
    architecture calls the norm before the MLP (its q rows may carry more than the queries: Qwen3-Next's gate)."""
    return {
        "input_layernorm.weight": norm(state[p + "attn_norm.weight"]),
        "self_attn.q_proj.weight": wq, "self_attn.k_proj.weight": wk, "self_attn.v_proj.weight": wv,
        "self_attn.o_proj.weight": state[p + "attn.proj.weight"],
        "self_attn.q_norm.weight": norm(state[p + "attn.q_norm.weight"]),
        "self_attn.k_norm.weight": norm(state[p + "attn.k_norm.weight"]),
        mlp_norm: norm(state[p + "mlp_norm.weight"]),
        "mlp.gate_proj.weight": state[p + "mlp.gate.weight"], "mlp.up_proj.weight": state[p + "mlp.up.weight"],
        "mlp.down_proj.weight": state[p + "mlp.down.weight"],
    }
