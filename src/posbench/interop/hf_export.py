"""A posbench checkpoint as a Hugging Face `transformers` model directory.

Three paths, chosen by what transformers can express:
- Qwen3 (no remote code). posbench's decoder is Qwen3's architecture (RMSNorm, SwiGLU, per-head QK RMSNorm
  before half-split RoPE, tied embeddings, no biases), so a RoPE checkpoint becomes a standard
  `Qwen3ForCausalLM` by renaming weights. RoPE scaling maps to transformers' `rope_parameters` only where
  the formulas are the same (none; pi = `linear`; yarn, computed as transformers does, docs/pe_defaults.md).
  NoPE is Qwen3 with `linear` scaling by 1e30: every angle is below 1e-25 rad, no rotation in fp32.
- Qwen3-Next (no remote code), for the gated-attention recipe (configs/recipe/qwen3_next.yaml: an elementwise gate
  and partial rotary): `Qwen3NextForCausalLM` with every layer full attention and dense MLPs, weights one to one
  (interop/hf_qwen3_next.py).
- Remote code, for every other PE (ALiBi, T5, KERPLE, FIRE, absolute tables, xPos, hybrids, a plug-in PE, ...),
  other RoPE scalings, untied embeddings, no QK-norm or rows split into documents (model.packing), and the
  attention options of docs/recipes.md (gates, sinks, temperatures, chunks, weightless or positional-only QK-norm):
  posbench's own parameter names, the decoder shell of hf_remote/ (`modeling_posbench.py`,
  `configuration_posbench.py`, ...) and posbench's own PE modules written flat beside it (hf_zoo.py), loaded with
  `trust_remote_code=True` through `auto_map`. Every registered PE exports this way but those that read the data's
  own position ids (refused with the reason: generate() cannot hand them over).
Nothing is ever written as a model that computes something else: the remote code loads the PE config with
posbench's strict loader, other architectures (encoder-decoder, Mamba) are refused, and every export is loaded back and
compared with posbench before it is moved into place: logits on random ids (the full forward), and a short
greedy generation through transformers' `generate` with its KV cache and without it, against posbench's own
greedy loop (the cache path is one the full forward never exercises: transformers 5.x renamed how it hands
the cache over, and a model that ignores it generates garbage while its logits still agree).

    config.json, generation_config.json   Qwen3Config or PosbenchConfig (+ auto_map)
    model.safetensors                     weights, fp32, tied head not duplicated
    tokenizer.json (+ tokenizer_config)   the checkpoint's tokenizer for PreTrainedTokenizerFast
    README.md                             a model card: training config, tokens seen, eval results if present
    modeling_posbench.py, configuration_posbench.py, packing.py, attention_options.py   remote-code path only:
    pe_zoo.py, pe_*.py, errors.py, config_loader.py, registry.py, yaml_io.py     the decoder shell and the PE zoo

Where the files go: a staging directory beside the target (same filesystem), renamed into place only after the
check passed, so the target is either absent, the user's old directory untouched, or the whole new export. A
non-empty target is refused (exit 2) unless `overwrite`, which replaces it whole: the old directory is moved
aside, the new one renamed in, then the old one removed. A link at the target is refused (fileio's module doc).
Files get the modes a plain `cp` gives (0666/0777 less the umask), not the 0600/0700 of temp files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from base64 import b64encode
from pathlib import Path

import torch

from posbench.config import RunConfig
from posbench.config_loader import dump_yaml
from posbench.data.tokenizers import BOS, Tokenizer
from posbench.errors import BadInputError, ConfigError, user_paths
from posbench.fileio import fsync_dir, link_error, remove_tree
from posbench.interop.hf_gpt_oss import gpt_oss_export
from posbench.interop.hf_qwen3_next import qwen3_next_config, qwen3_next_reason, qwen3_next_state_dict
from posbench.interop.hf_remote.packing import check_packing
from posbench.interop.hf_verify import VERIFY_TOLERANCE, check_prompt, uses_dynamic_scaling, verify
from posbench.interop.hf_zoo import zoo_files

NOPE_FACTOR = 1e30  # linear RoPE scaling that makes every angle vanish (see the module docstring)
REMOTE_DIR = Path(__file__).parent / "hf_remote"
# every module of hf_remote/ but its __init__: the decoder shell transformers loads from the export directory (beside
# the PE zoo, hf_zoo.zoo_files)
REMOTE_FILES = tuple(sorted(p.name for p in REMOTE_DIR.glob("*.py") if p.name != "__init__.py"))
QWEN3, QWEN3_NEXT, REMOTE = "Qwen3ForCausalLM", "Qwen3NextForCausalLM", "PosbenchForCausalLM"
GPT_OSS = "GptOssForCausalLM"
# model options that Qwen3 does not compute, each with its value when off: a model with one on exports as
# Qwen3NextForCausalLM where that carries it (interop/hf_qwen3_next.py), else with the remote code (which has them all)
QWEN3_LACKS = {"attention_gate": lambda m: m.attention_gate, "attention_sinks": lambda m: m.attention_sinks,
                "attention_temperature": lambda m: m.attention_temperature.name,
                "attention_chunk": lambda m: m.attention_chunk, "qk_norm_weight": lambda m: m.qk_norm_weight,
                "qk_norm_layers": lambda m: m.qk_norm_layers}
QWEN3_LACKS_OFF = {"attention_gate": "none", "attention_sinks": False, "attention_temperature": "none",
                    "attention_chunk": None, "qk_norm_weight": True, "qk_norm_layers": "all"}


def options_qwen3_lacks(m) -> list[str]:
    """`model.<option>=<value>` of each option on that Qwen3 does not compute."""
    return [f"model.{option}={value(m)}" for option, value in QWEN3_LACKS.items()
            if value(m) != QWEN3_LACKS_OFF[option]]


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


def qwen3_reason(run_cfg: RunConfig) -> str | None:
    """None when the checkpoint is a standard Qwen3ForCausalLM, else why not (the remote-code path is used)."""
    m = run_cfg.model
    if not (m.tie_embeddings and m.qk_norm):
        return "untied embeddings or no QK-norm (model.tie_embeddings, model.qk_norm) do not map onto Qwen3"
    if m.embed_scale != "none":
        return f"model.embed_scale={m.embed_scale} has no counterpart in Qwen3 (it never scales token embeddings)"
    if m.packing.active:
        return (f"model.packing (mask={m.packing.mask}, positions={m.packing.positions}) splits a row into documents "
                f"at token {m.packing.bos_id}; Qwen3 attends across them and counts positions from the row's start")
    if m.attention_window is not None:
        return f"model.attention_window={m.attention_window} is exported with posbench's remote code"
    lacking = options_qwen3_lacks(m)
    if lacking:
        return f"{', '.join(lacking)} has no counterpart in Qwen3"
    try:
        rope_parameters(run_cfg)
    except ConfigError as e:
        return str(e)
    return None


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


def refuse_data_positions(run_cfg: RunConfig) -> None:
    """A PE that reads the data's own position ids (`PositionalEncoding.reads_data_positions`: abacus, coupled) is
    not exported: transformers' generate() hands a model token indices only, so the exported model would never see
    the task's digit places it was trained with and would silently compute something else."""
    from posbench.pe import PES

    if PES.get(run_cfg.pe.name).reads_data_positions():
        raise ConfigError(f"PE `{run_cfg.pe.name}` takes its positions from the data (a task's per-token ids, e.g. "
                          "digit places), which a transformers model cannot be given through generate(); it is not "
                          "exported. Evaluate it with posbench (posbench eval / posbench study). Nothing was "
                          "exported")


# meaning hooks the exported decoder shell (interop/hf_remote/modeling_posbench.py) does not thread through its layers:
# positions read from a layer's input (RePo) and a state carried from layer to layer (TAPE); an exported model would
# silently compute without them, so such a PE is refused until the shell threads them
UNTHREADED_HOOKS = {"token_positions": "reads its positions from each layer's input",
                    "start_state": "carries a position state from layer to layer"}


def _pe_names(pe: dict) -> list[str]:
    """Every PE a PE config names: its own and its members' (a hybrid's pattern, a wrapper's inner), at any depth."""
    out = [pe["name"]] if isinstance(pe.get("name"), str) else []
    for value in pe.values():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, dict):
                out += _pe_names(v)
    return out


def refuse_unthreaded_hooks(run_cfg: RunConfig) -> None:
    """A PE (or a member of one) with a hook the decoder shell does not thread (UNTHREADED_HOOKS) is not exported."""
    from posbench.config_loader import to_dict
    from posbench.pe import PES
    from posbench.pe.encoding import overrides
    from posbench.pe.wrapper import WrapperPE

    for name in _pe_names(to_dict(run_cfg.pe)):
        if name not in PES.names() or issubclass(PES.get(name), WrapperPE):  # a wrapper hands the hooks to its inner
            continue
        for hook, what in UNTHREADED_HOOKS.items():
            if overrides(PES.get(name), hook):
                raise ConfigError(f"PE `{name}` {what} (`{hook}`), which the exported model's decoder shell does not "
                                  "thread through its layers; it is not exported. Evaluate it with posbench (posbench "
                                  "eval / posbench study). Nothing was exported")


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
    from tokenizers import processors
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
    # <|bos|> first, as every training document and evaluation prompt began: `tokenizer(text)` gives what the model
    # saw (add_special_tokens=False leaves it out); kept in tokenizer.json, so any loader of it does the same
    template = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                             special_tokens=[(BOS, tokenizer.bos_id)])
    converted.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False), template])
    return PreTrainedTokenizerFast(tokenizer_object=converted, bos_token=BOS, eos_token=BOS)


def model_card(run_cfg: RunConfig, meta: dict, step_dir: Path, kind: str, why_remote: str | None,
               bos_id: int) -> str:
    load = "from_pretrained(path, trust_remote_code=True)" if why_remote else "from_pretrained(path)"
    evals = sorted((step_dir.parent / "eval").glob("*/summary.md")) if (step_dir.parent / "eval").is_dir() else []
    parts = [f"# {step_dir.parent.name} (posbench export)", "",
             f"A decoder-only language model trained with pos-enc-bench, positional encoding `{run_cfg.pe.name}`, "
             f"exported as `{kind}`: `AutoModelForCausalLM.{load}` "
             "loads it without posbench (the tokenizer: see Loading).", "",
             f"- step {meta.get('step')}, {meta.get('tokens', 0):,} training tokens, training length "
             f"{run_cfg.model.seq_len} tokens", f"- tokenizer `{run_cfg.data.tokenizer.tag()}`", ""]
    if why_remote:
        parts += [f"Remote code: {why_remote}. `modeling_posbench.py` (torch and transformers only) implements "
                  "posbench's decoder, and posbench's own PE modules beside it (`pe_<module>.py`, imported by "
                  "`pe_zoo.py`) this PE; greedy generation uses the KV cache"
                  + (" except for randomized positions, which are drawn per sequence" if "randomized" in
                     json.dumps(dataclasses.asdict(run_cfg.pe)) else "") + ".", ""]
    elif position_free(run_cfg):
        dropped = " (DroPE after its drop: trained with RoPE, then recalibrated without it)" if run_cfg.pe.name != \
            "none" else ""
        parts += [f"NoPE{dropped} is written as Qwen3 with linear RoPE scaling by 1e30: every rotation angle is "
                  "below 1e-25 rad, so the model attends without positional information, as trained.", ""]
    parts += ["## Loading", "", "```python", "import transformers", "",
              f"model = transformers.AutoModelForCausalLM.{load}"]
    if why_remote:
        # AutoTokenizer reads config.json first, whose model type only the remote code defines: without
        # trust_remote_code it stops at transformers' "run the custom code?" prompt. The tokenizer itself is a
        # standard fast tokenizer (tokenizer.json), which its own class loads without any remote code.
        parts += ["tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(path)  # no remote code",
                  "# or: transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=True)"]
    else:
        parts += ["tokenizer = transformers.AutoTokenizer.from_pretrained(path)"]
    parts += ["```", "",
              f"The tokenizer adds `{BOS}` (id {bos_id}) before every text, as each training document began: "
              "`tokenizer(text)` gives what the model saw; `add_special_tokens=False` leaves it out.", ""]
    parts += ["## Training configuration", "", "```yaml", dump_yaml(run_cfg).rstrip(), "```", ""]
    for summary in evals:
        parts += [f"## Evaluation ({summary.parent.name})", "", summary.read_text().strip(), ""]
    return "\n".join(parts)


def check_target(out: Path, overwrite: bool) -> None:
    """Refuse (exit 2) a target that is a link, or that holds anything and `overwrite` is not given."""
    if out.is_symlink():
        raise link_error(out)
    if not os.path.lexists(out) or overwrite:
        return
    if not out.is_dir():
        raise BadInputError(f"{out} exists and is not a directory; pass --overwrite to replace it with the export, "
                            "or choose another output directory")
    entries = sorted(p.name for p in out.iterdir())
    if entries:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise BadInputError(f"{out} is not empty ({len(entries)} entries: {shown}); pass --overwrite to replace it "
                            "whole, or choose an empty or new directory")


def make_shareable(folder: Path) -> None:
    """The modes `cp` would give (0666/0777 less the umask): mkdtemp makes 0700 directories, and safetensors and
    tempfile write 0600 files."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(folder, 0o777 & ~mask)
    for path in folder.rglob("*"):
        if not path.is_symlink():
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def place(staging: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished `staging` directory to `out`: the old `out` (only with `overwrite`) is moved aside
    first and removed once the new one is in place; an empty `out` is simply replaced."""
    check_target(out, overwrite)  # again: the target may have been filled while the export was checked
    aside = None
    if os.path.lexists(out):
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        else:
            aside = out.parent / f".{out.name}.old-{os.getpid()}"
            remove_tree(aside)
            os.replace(out, aside)
    try:
        os.replace(staging, out)
    except BaseException:
        if aside is not None:
            os.replace(aside, out)
        raise
    fsync_dir(out.parent)
    if aside is not None:
        if aside.is_dir() and not aside.is_symlink():
            shutil.rmtree(aside)
        else:
            aside.unlink()


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
            for name in REMOTE_FILES:
                shutil.copyfile(REMOTE_DIR / name, tmp / name)
            for name, text in zoo.items():  # posbench's PE modules, flat, as the decoder imports them (hf_zoo.py)
                (tmp / name).write_text(text, encoding="utf-8")
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
