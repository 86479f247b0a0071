"""A posbench checkpoint as a Hugging Face `transformers` model directory.

Four paths, chosen by what transformers can express:
- Qwen3 (no remote code): a RoPE or NoPE checkpoint as a standard `Qwen3ForCausalLM` by renaming weights
  (interop/hf_qwen3.py; hf_refusals.qwen3_reason says why a checkpoint is not one).
- Qwen3-Next (no remote code), for the gated-attention recipe (configs/recipe/qwen3_next.yaml: an elementwise gate
  and partial rotary): `Qwen3NextForCausalLM` with every layer full attention and dense MLPs, weights one to one
  (interop/hf_qwen3_next.py).
- GptOss (no remote code), for the gpt_oss recipe when it maps exactly (interop/hf_gpt_oss.py).
- Remote code, for every other PE, RoPE scaling and model option (interop/hf_posbench.py): posbench's own
  parameter names, the decoder shell of hf_remote/ and posbench's own PE modules written flat beside it (hf_zoo.py),
  loaded with `trust_remote_code=True` through `auto_map`. Every registered PE exports this way but those
  interop/hf_refusals.py refuses (positions read from the data, which generate() cannot hand over; hooks the shell
  does not thread).
Nothing is ever written as a model that computes something else: the remote code loads the PE config with
posbench's strict loader, other architectures (encoder-decoder, Mamba) are refused, and every export is loaded back and
compared with posbench before it is moved into place (interop/hf_target.py): logits on random ids (the full forward),
and a short greedy generation through transformers' `generate` with its KV cache and without it, against posbench's
own greedy loop (the cache path is one the full forward never exercises: transformers 5.x renamed how it hands
the cache over, and a model that ignores it generates garbage while its logits still agree).

    config.json, generation_config.json   Qwen3Config, Qwen3NextConfig, GptOssConfig or PosbenchConfig (+ auto_map)
    model.safetensors                     weights, fp32, tied head not duplicated
    tokenizer.json (+ tokenizer_config)   the checkpoint's tokenizer for PreTrainedTokenizerFast (hf_tokenizer.py)
    README.md                             a model card (hf_card.py): training config, tokens seen, eval results
    modeling_posbench.py, configuration_posbench.py, ...   remote-code path only: the decoder shell (hf_remote/)
    pe_zoo.py, pe_*.py, errors.py, config_loader.py, registry.py, yaml_io.py     and the PE zoo (hf_zoo.py)
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

from posbench.errors import ConfigError, user_paths
from posbench.fileio import remove_tree
from posbench.interop.hf_card import model_card
from posbench.interop.hf_gpt_oss import gpt_oss_export
from posbench.interop.hf_posbench import (
    REMOTE,
    REMOTE_FILES,
    remote_config,
    remote_packing,
    remote_pe_config,
    remote_state_dict,
    write_remote_code,
)
from posbench.interop.hf_qwen3 import QWEN3, hf_state_dict, qwen3_config
from posbench.interop.hf_qwen3_next import qwen3_next_config, qwen3_next_reason, qwen3_next_state_dict
from posbench.interop.hf_refusals import qwen3_reason, refuse_data_positions, refuse_unthreaded_hooks
from posbench.interop.hf_target import check_target, make_shareable, place
from posbench.interop.hf_tokenizer import hf_tokenizer
from posbench.interop.hf_verify import VERIFY_TOLERANCE, check_prompt, uses_dynamic_scaling, verify
from posbench.interop.hf_zoo import zoo_files

QWEN3_NEXT, GPT_OSS = "Qwen3NextForCausalLM", "GptOssForCausalLM"


def export(checkpoint: str | Path, out_dir: str | Path, log=print, overwrite: bool = False,
           tolerance: float = VERIFY_TOLERANCE) -> Path:
    """Write the HF directory for `checkpoint` as out_dir (refused before writing anything when the PE or the
    model cannot be expressed, or out_dir is not empty without `overwrite`; not kept when the check finds it
    computing more than `tolerance` x the largest logit away from posbench). Returns out_dir."""
    if not 0 < tolerance < 1:
        raise ConfigError(f"the export check's tolerance must be in (0, 1) (relative to the largest logit), got "
                          f"{tolerance}; the default is {VERIFY_TOLERANCE}")
    from safetensors.torch import save_file
    from transformers import GenerationConfig

    from posbench.data.layout import DataLayout
    from posbench.evaluation.generate import supports_cache
    from posbench.evaluation.loading import load_model

    out = Path(out_dir)
    with user_paths():
        check_target(out, overwrite)  # before any work
    loaded = load_model(checkpoint, "cpu")
    run_cfg, model = loaded.cfg, loaded.model
    refuse_data_positions(run_cfg)  # before any file is written
    refuse_unthreaded_hooks(run_cfg)
    why_remote = qwen3_reason(run_cfg)
    if why_remote and qwen3_next_reason(run_cfg.model, run_cfg.pe) is None:
        why_remote = None  # the gated-attention recipe: a standard Qwen3NextForCausalLM (interop/hf_qwen3_next.py)
    tokenizer = DataLayout.from_config(run_cfg.data).tokenizer.build()
    # the gpt_oss recipe: a standard GptOssForCausalLM when it maps exactly (interop/hf_gpt_oss.py)
    gpt_oss = gpt_oss_export(run_cfg, model, tolerance, bos_token_id=tokenizer.bos_id,
                             eos_token_id=tokenizer.bos_id, architectures=[GPT_OSS]) if why_remote else None
    if gpt_oss is not None:
        why_remote = None
    pe = remote_pe_config(run_cfg) if why_remote else None  # refuses before any file is written
    packing = remote_packing(run_cfg) if why_remote else None  # likewise
    zoo = zoo_files({Path(name).stem for name in REMOTE_FILES}) if why_remote else {}  # likewise
    whole_sequence = not supports_cache(model)
    with user_paths():  # out_dir is the user's: a file in its way, no permission to write there
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".export", dir=out.parent))
    try:
        if why_remote:
            kind = REMOTE
            remote_config(run_cfg, tokenizer, pe, whole_sequence, packing).save_pretrained(tmp)
            state = remote_state_dict(model)
            write_remote_code(tmp, zoo)
        elif gpt_oss is not None:
            kind = GPT_OSS
            config, state = gpt_oss
            config.save_pretrained(tmp)
        elif run_cfg.model.attention_gate != "none":
            kind = QWEN3_NEXT
            m = run_cfg.model
            qwen3_next_config(m, run_cfg.pe, bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.bos_id,
                              architectures=[QWEN3_NEXT]).save_pretrained(tmp)
            state = qwen3_next_state_dict(model.state_dict(), m.n_layers, m.n_heads, m.tie_embeddings)
        else:
            kind = QWEN3
            qwen3_config(run_cfg, tokenizer).save_pretrained(tmp)
            state = hf_state_dict(model.state_dict(), run_cfg.model.n_layers)
        GenerationConfig(bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.bos_id, do_sample=False,
                         use_cache=not whole_sequence).save_pretrained(tmp)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        hf_tokenizer(tokenizer).save_pretrained(tmp)
        (tmp / "README.md").write_text(model_card(run_cfg, loaded.meta, loaded.path, kind, why_remote,
                                                           tokenizer.bos_id))
        (tmp / "posbench_export.json").write_text(json.dumps({"checkpoint": str(loaded.path), "pe": run_cfg.pe.name,
                                                              "architecture": kind}, indent=1))
        boundary = packing["bos_id"] if packing else None  # the checks then cross a document boundary
        prompt, n_new = check_prompt(tokenizer, model.pe.max_positions, boundary)
        diff, gen_diff, notes = verify(tmp, model, model.pe.max_positions, bool(why_remote), prompt, n_new,
                                       whole_sequence, not uses_dynamic_scaling(dataclasses.asdict(run_cfg.pe)),
                                       boundary, tolerance)
        with user_paths():
            make_shareable(tmp)
            place(tmp, out, overwrite)
    finally:
        remove_tree(tmp)  # gone already when it was renamed into place
    how = f"{REMOTE} (remote code: {why_remote})" if why_remote else kind
    kinds = "uncached" if whole_sequence else "cached and uncached"
    log(f"exported {loaded.path} ({run_cfg.pe.name}) as {how} to {out}; max |logit difference| on random ids "
        f"{diff:.2g}; greedy generation ({n_new} tokens, {kinds}) as posbench's, max |score difference| "
        f"{gen_diff:.2g}" + "".join(f"; {note}" for note in notes))
    return out
