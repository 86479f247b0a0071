"""The remote-code path of the export (`PosbenchForCausalLM`), for every model no transformers architecture computes
(ALiBi, T5, KERPLE, FIRE, absolute tables, xPos, hybrids, a plug-in PE, ..., other RoPE scalings, untied embeddings,
no QK-norm, rows split into documents, the attention options of docs/recipes.md): posbench's own parameter names, a
`PosbenchConfig` with `auto_map`, and the decoder shell of hf_remote/ (`REMOTE_FILES`) beside posbench's own PE
modules (hf_zoo.py), loaded with `trust_remote_code=True`. The shell loads the PE config with posbench's strict
loader, so nothing is written that the remote code would read as another model: what it cannot express is refused
here (ConfigError).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import torch

from posbench.config import RunConfig
from posbench.data.tokenizers import Tokenizer
from posbench.errors import ConfigError
from posbench.interop.hf_remote.packing import check_packing

REMOTE = "PosbenchForCausalLM"
REMOTE_DIR = Path(__file__).parent / "hf_remote"
# every module of hf_remote/ but its __init__: the decoder shell transformers loads from the export directory (beside
# the PE zoo, hf_zoo.zoo_files)
REMOTE_FILES = tuple(sorted(p.name for p in REMOTE_DIR.glob("*.py") if p.name != "__init__.py"))


def remote_packing(run_cfg: RunConfig) -> dict | None:
    """model.packing as the plain dict the remote code reads (it splits rows into documents at bos_id as posbench
    does), None when rows are not split (the default, or no bos_id: each row one document); ConfigError when the
    remote code cannot express it."""
    p = run_cfg.model.packing
    if not p.active:
        return None
    try:
        return check_packing(dataclasses.asdict(p))
    except ValueError as e:
        raise ConfigError(f"{e}. Nothing was exported") from None


def remote_pe_config(run_cfg: RunConfig) -> dict:
    """The PE config as the plain dict config.json carries, checked to load back (through JSON) as this very config
    with the strict loader the remote code uses; ConfigError when the remote code cannot express the model."""
    from posbench.config_loader import from_dict
    from posbench.pe import PEConfig

    arch = run_cfg.model.arch.name
    if arch != "decoder":
        raise ConfigError(f"model.arch={arch} is not a decoder-only transformer; neither transformers' Qwen3 nor "
                          "posbench's remote modeling code computes it. Nothing was exported")
    pe = json.loads(json.dumps(dataclasses.asdict(run_cfg.pe)))
    if from_dict(PEConfig, pe, "pe") != run_cfg.pe:
        raise ConfigError(f"PE `{run_cfg.pe.name}`'s config does not survive config.json ({pe}): a field's value is "
                          "not plain JSON data (numbers, strings, lists, mappings). Nothing was exported")
    return pe


def remote_config(run_cfg: RunConfig, tokenizer: Tokenizer, pe: dict, whole_sequence: bool,
                  packing: dict | None = None):
    from posbench.interop.hf_remote.configuration_posbench import PosbenchConfig

    m = run_cfg.model
    return PosbenchConfig(vocab_size=m.vocab_size, hidden_size=m.d_model, intermediate_size=m.d_ff,
                          num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads,
                          max_position_embeddings=m.seq_len, rms_norm_eps=m.norm_eps, qk_norm=m.qk_norm,
                          init_std=m.init_std, pe=pe, embed_scale=m.embed_scale, attention_window=m.attention_window,
                          attention_gate=m.attention_gate, attention_sinks=m.attention_sinks,
                          attention_temperature=dataclasses.asdict(m.attention_temperature),
                          attention_chunk=m.attention_chunk, qk_norm_weight=m.qk_norm_weight,
                          qk_norm_layers=m.qk_norm_layers,
                          tie_word_embeddings=m.tie_embeddings, packing=packing, bos_token_id=tokenizer.bos_id,
                          eos_token_id=tokenizer.bos_id, use_cache=not whole_sequence, architectures=[REMOTE],
                          auto_map={"AutoConfig": "configuration_posbench.PosbenchConfig",
                                    "AutoModelForCausalLM": "modeling_posbench.PosbenchForCausalLM"})


def remote_state_dict(model) -> dict[str, torch.Tensor]:
    """posbench's own names (the remote code uses them); a tied head is left out (transformers re-ties it)."""
    state = model.state_dict()
    if model.cfg.tie_embeddings:
        state.pop("lm_head.weight")
    return {k: v.detach().to(torch.float32).contiguous().clone() for k, v in state.items()}


def write_remote_code(folder: Path, zoo: dict[str, str]) -> None:
    """The decoder shell (REMOTE_FILES, copied as they are) and `zoo`, posbench's PE modules written flat, as the
    decoder imports them (hf_zoo.zoo_files), into `folder`."""
    for name in REMOTE_FILES:
        shutil.copyfile(REMOTE_DIR / name, folder / name)
    for name, text in zoo.items():
        (folder / name).write_text(text, encoding="utf-8")
