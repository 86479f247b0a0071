"""A posbench checkpoint as a Hugging Face `transformers` model directory, loadable with no posbench.

posbench's decoder is Qwen3's architecture (RMSNorm, SwiGLU, per-head QK RMSNorm before half-split RoPE,
tied embeddings, no biases), so a RoPE checkpoint becomes a standard `Qwen3ForCausalLM` by renaming
weights: `AutoModelForCausalLM.from_pretrained(OUT)` loads it with no remote code. RoPE scaling is mapped
to transformers' `rope_parameters` only where the formulas are the same (none; pi = `linear`; yarn, which
posbench computes as transformers does, docs/pe_defaults.md). NoPE is Qwen3 with `linear` scaling by
1e30: every rotation angle is then below 1e-25 rad, so cos = 1 and sin < 1e-25 in fp32, which is no
rotation to within fp32 rounding. Other PEs (ALiBi, T5, KERPLE, FIRE, the absolute tables, ...) have no
transformers architecture; exporting them is refused with that reason rather than written as a model that
would compute something else.

    config.json, generation_config.json   Qwen3Config (transformers' own save_pretrained)
    model.safetensors                     weights, fp32, tied head not duplicated
    tokenizer.json (+ tokenizer_config)   the checkpoint's tokenizer for PreTrainedTokenizerFast
    README.md                             a model card: training config, tokens seen, eval results if present
"""

from __future__ import annotations

import json
import tempfile
from base64 import b64encode
from pathlib import Path

import torch

from posbench.config import RunConfig
from posbench.config_loader import ConfigError, dump_yaml
from posbench.data.tokenizers import BOS, Tokenizer

NOPE_FACTOR = 1e30  # linear RoPE scaling that makes every angle vanish (see the module docstring)


def rope_parameters(run_cfg: RunConfig) -> dict:
    """transformers' rope_parameters for the checkpoint's PE; ConfigError when Qwen3 cannot express it."""
    pe = run_cfg.pe
    if pe.name == "none":
        return {"rope_type": "linear", "rope_theta": 10000.0, "factor": NOPE_FACTOR}
    if pe.name != "rope":
        raise ConfigError(f"PE `{pe.name}` has no architecture in transformers (only RoPE and NoPE map onto "
                          "Qwen3); exporting it would need posbench's own modeling code, which this exporter "
                          "does not write yet. Nothing was exported")
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


def check_exportable(run_cfg: RunConfig) -> None:
    m = run_cfg.model
    if not (m.tie_embeddings and m.qk_norm):
        raise ConfigError("only models with tied embeddings and QK-norm map onto Qwen3 (model.tie_embeddings, "
                          "model.qk_norm); nothing was exported")
    if m.embed_scale != "none":  # Qwen3 adds nothing to its embeddings and never scales them
        raise ConfigError(f"model.embed_scale={m.embed_scale} has no counterpart in Qwen3 (its token embeddings are "
                          "not scaled); nothing was exported")


def qwen3_config(run_cfg: RunConfig, tokenizer: Tokenizer):
    from transformers import Qwen3Config

    m = run_cfg.model
    return Qwen3Config(vocab_size=m.vocab_size, hidden_size=m.d_model, intermediate_size=m.d_ff,
                       num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads, num_key_value_heads=m.n_heads,
                       head_dim=m.head_dim, hidden_act="silu", max_position_embeddings=m.seq_len,
                       rms_norm_eps=m.norm_eps, tie_word_embeddings=True, rope_parameters=rope_parameters(run_cfg),
                       attention_bias=False, attention_dropout=0.0, use_sliding_window=False,
                       bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.bos_id,
                       architectures=["Qwen3ForCausalLM"])


def hf_tokenizer(tokenizer: Tokenizer):
    """A PreTrainedTokenizerFast with the same ids as `tokenizer`: its rank table, split pattern and special
    tokens go through transformers' own tiktoken converter (byte-level BPE, merges recovered from ranks)."""
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    enc = tokenizer.encoding
    with tempfile.TemporaryDirectory() as tmp:
        ranks = Path(tmp) / "ranks.tiktoken"
        ranks.write_text("".join(f"{b64encode(tok).decode()} {rank}\n"
                                 for tok, rank in sorted(enc._mergeable_ranks.items(), key=lambda kv: kv[1])))
        specials = sorted(enc._special_tokens, key=enc._special_tokens.get)
        converted = TikTokenConverter(vocab_file=str(ranks), pattern=enc._pat_str,
                                      extra_special_tokens=specials).converted()
    return PreTrainedTokenizerFast(tokenizer_object=converted, bos_token=BOS, eos_token=BOS)


def model_card(run_cfg: RunConfig, meta: dict, step_dir: Path, kind: str) -> str:
    evals = sorted((step_dir.parent / "eval").glob("*/summary.md")) if (step_dir.parent / "eval").is_dir() else []
    parts = [f"# {step_dir.parent.name} (posbench export)", "",
             f"A decoder-only language model trained with pos-enc-bench, positional encoding `{run_cfg.pe.name}`, "
             f"exported as `{kind}`: `AutoModelForCausalLM.from_pretrained(path)` loads it without posbench.", "",
             f"- step {meta.get('step')}, {meta.get('tokens', 0):,} training tokens, training length "
             f"{run_cfg.model.seq_len} tokens", f"- tokenizer `{run_cfg.data.tokenizer.tag()}`", ""]
    if run_cfg.pe.name == "none":
        parts += ["NoPE is written as Qwen3 with linear RoPE scaling by 1e30: every rotation angle is below 1e-25 "
                  "rad, so the model attends without positional information, as trained.", ""]
    parts += ["## Training configuration", "", "```yaml", dump_yaml(run_cfg).rstrip(), "```", ""]
    for summary in evals:
        parts += [f"## Evaluation ({summary.parent.name})", "", summary.read_text().strip(), ""]
    return "\n".join(parts)


def export(checkpoint: str | Path, out_dir: str | Path, log=print) -> Path:
    """Write the HF directory for `checkpoint` into out_dir (refused before writing anything when the PE or
    the model cannot be expressed). Returns out_dir."""
    from safetensors.torch import save_file
    from transformers import GenerationConfig

    from posbench.data.layout import DataLayout
    from posbench.evaluation.loading import load_model

    loaded = load_model(checkpoint, "cpu")
    run_cfg = loaded.cfg
    check_exportable(run_cfg)
    rope_parameters(run_cfg)  # refuses before any file is written
    tokenizer = DataLayout.from_config(run_cfg.data).tokenizer.build()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = qwen3_config(run_cfg, tokenizer)
    config.save_pretrained(out)
    GenerationConfig(bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.bos_id, do_sample=False).save_pretrained(out)
    save_file(hf_state_dict(loaded.model.state_dict(), run_cfg.model.n_layers), str(out / "model.safetensors"),
              metadata={"format": "pt"})
    hf_tokenizer(tokenizer).save_pretrained(out)
    (out / "README.md").write_text(model_card(run_cfg, loaded.meta, loaded.path, "Qwen3ForCausalLM"))
    (out / "posbench_export.json").write_text(json.dumps({"checkpoint": str(loaded.path), "pe": run_cfg.pe.name,
                                                          "architecture": "Qwen3ForCausalLM"}, indent=1))
    log(f"exported {loaded.path} ({run_cfg.pe.name}) as Qwen3ForCausalLM to {out}")
    return out
