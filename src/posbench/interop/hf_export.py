"""A posbench checkpoint as a Hugging Face `transformers` model directory.

Two paths, chosen by what transformers can express:
- Qwen3 (no remote code). posbench's decoder is Qwen3's architecture (RMSNorm, SwiGLU, per-head QK RMSNorm
  before half-split RoPE, tied embeddings, no biases), so a RoPE checkpoint becomes a standard
  `Qwen3ForCausalLM` by renaming weights. RoPE scaling maps to transformers' `rope_parameters` only where
  the formulas are the same (none; pi = `linear`; yarn, computed as transformers does, docs/pe_defaults.md).
  NoPE is Qwen3 with `linear` scaling by 1e30: every angle is below 1e-25 rad, no rotation in fp32.
- Remote code, for every other PE (ALiBi, T5, KERPLE, FIRE, absolute tables, xPos, hybrids, ...), other
  RoPE scalings, untied embeddings or no QK-norm: posbench's own parameter names, plus
  `modeling_posbench.py` / `configuration_posbench.py` (hf_remote/; torch + transformers only) that
  implement every PE family, loaded with `trust_remote_code=True` through `auto_map`.
Nothing is ever written as a model that computes something else: the remote code refuses PE options it does
not implement, other architectures (encoder-decoder, Mamba) are refused, and every export is loaded back and
compared with posbench before it is moved into place: logits on random ids (the full forward), and a short
greedy generation through transformers' `generate` with its KV cache and without it, against posbench's own
greedy loop (the cache path is one the full forward never exercises: transformers 5.x renamed how it hands
the cache over, and a model that ignores it generates garbage while its logits still agree).

    config.json, generation_config.json   Qwen3Config or PosbenchConfig (+ auto_map)
    model.safetensors                     weights, fp32, tied head not duplicated
    tokenizer.json (+ tokenizer_config)   the checkpoint's tokenizer for PreTrainedTokenizerFast
    README.md                             a model card: training config, tokens seen, eval results if present
    modeling_posbench.py, configuration_posbench.py   remote-code path only

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
from posbench.config_loader import ConfigError, dump_yaml
from posbench.data.tokenizers import BOS, Tokenizer
from posbench.errors import BadInputError, user_paths
from posbench.fileio import fsync_dir, link_error, remove_tree

NOPE_FACTOR = 1e30  # linear RoPE scaling that makes every angle vanish (see the module docstring)
REMOTE_DIR = Path(__file__).parent / "hf_remote"
REMOTE_FILES = ("modeling_posbench.py", "configuration_posbench.py")
QWEN3, REMOTE = "Qwen3ForCausalLM", "PosbenchForCausalLM"
# export check: random ids through posbench and the written directory; far above fp32 kernel noise (~1e-6),
# far below what a wrong weight or PE would give
VERIFY_TOLERANCE = 1e-3
# export check of decoding: CHECK_NEW greedy tokens after the checkpoint's own tokenizer's first CHECK_PROMPT
# ids of CHECK_TEXT (fewer where a bounded PE has fewer positions)
CHECK_TEXT = "The positional encoding of a transformer"
CHECK_PROMPT, CHECK_NEW = 8, 8


def rope_parameters(run_cfg: RunConfig) -> dict:
    """transformers' rope_parameters for the checkpoint's PE; ConfigError when Qwen3 cannot express it."""
    pe = run_cfg.pe
    if pe.name == "none":
        return {"rope_type": "linear", "rope_theta": 10000.0, "factor": NOPE_FACTOR}
    if pe.name != "rope":
        raise ConfigError(f"PE `{pe.name}` has no architecture in transformers (only RoPE and NoPE map onto "
                          "Qwen3)")
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
    try:
        rope_parameters(run_cfg)
    except ConfigError as e:
        return str(e)
    return None


def refuse_packing(run_cfg: RunConfig) -> None:
    """model.packing other than causal/window is not exported: neither Qwen3 nor the remote code splits a row into
    documents at <|bos|> or restarts positions there, so a row holding several documents would compute something
    else than posbench does (one document per row computes the same; passing position_ids and a document mask is
    not implemented yet)."""
    p = run_cfg.model.packing
    if not p.is_default:
        raise ConfigError(f"model.packing (mask={p.mask}, positions={p.positions}) is not exported: the exported "
                          "model would attend across documents and count positions from the row's start where "
                          "posbench restarts them at each <|bos|> (position_ids/document masks for the export are "
                          "not implemented). Nothing was exported")


def remote_pe_config(run_cfg: RunConfig) -> dict:
    """The PE config as the plain dict the remote code reads; ConfigError when it cannot express the model."""
    from posbench.interop.hf_remote.modeling_posbench import check_pe_config

    arch = run_cfg.model.arch.name
    if arch != "decoder":
        raise ConfigError(f"model.arch={arch} is not a decoder-only transformer; neither transformers' Qwen3 nor "
                          "posbench's remote modeling code computes it. Nothing was exported")
    pe = dataclasses.asdict(run_cfg.pe)
    try:
        check_pe_config(pe)
    except ValueError as e:
        raise ConfigError(f"{e}. Nothing was exported") from None
    return pe


def remote_config(run_cfg: RunConfig, tokenizer: Tokenizer, pe: dict, whole_sequence: bool):
    from posbench.interop.hf_remote.configuration_posbench import PosbenchConfig

    m = run_cfg.model
    return PosbenchConfig(vocab_size=m.vocab_size, hidden_size=m.d_model, intermediate_size=m.d_ff,
                          num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads,
                          max_position_embeddings=m.seq_len, rms_norm_eps=m.norm_eps, qk_norm=m.qk_norm,
                          init_std=m.init_std, pe=pe, embed_scale=m.embed_scale,
                          tie_word_embeddings=m.tie_embeddings, bos_token_id=tokenizer.bos_id,
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


def model_card(run_cfg: RunConfig, meta: dict, step_dir: Path, kind: str, why_remote: str | None = None) -> str:
    load = "from_pretrained(path, trust_remote_code=True)" if why_remote else "from_pretrained(path)"
    evals = sorted((step_dir.parent / "eval").glob("*/summary.md")) if (step_dir.parent / "eval").is_dir() else []
    parts = [f"# {step_dir.parent.name} (posbench export)", "",
             f"A decoder-only language model trained with pos-enc-bench, positional encoding `{run_cfg.pe.name}`, "
             f"exported as `{kind}`: `AutoModelForCausalLM.{load}` "
             "loads it without posbench.", "",
             f"- step {meta.get('step')}, {meta.get('tokens', 0):,} training tokens, training length "
             f"{run_cfg.model.seq_len} tokens", f"- tokenizer `{run_cfg.data.tokenizer.tag()}`", ""]
    if why_remote:
        parts += [f"Remote code: {why_remote}. `modeling_posbench.py` (torch and transformers only) implements "
                  "posbench's decoder and this PE; greedy generation uses the KV cache"
                  + (" except for randomized positions, which are drawn per sequence" if "randomized" in
                     json.dumps(dataclasses.asdict(run_cfg.pe)) else "") + ".", ""]
    elif run_cfg.pe.name == "none":
        parts += ["NoPE is written as Qwen3 with linear RoPE scaling by 1e30: every rotation angle is below 1e-25 "
                  "rad, so the model attends without positional information, as trained.", ""]
    parts += ["## Training configuration", "", "```yaml", dump_yaml(run_cfg).rstrip(), "```", ""]
    for summary in evals:
        parts += [f"## Evaluation ({summary.parent.name})", "", summary.read_text().strip(), ""]
    return "\n".join(parts)


def check_prompt(tokenizer: Tokenizer, max_positions: int | None) -> tuple[list[int], int]:
    """The generation check's prompt ids and number of new tokens, within a bounded PE's range (the last new
    token is never fed back, so prompt + new - 1 positions are used)."""
    limit = max_positions or CHECK_PROMPT + CHECK_NEW
    prompt = tokenizer.encode(CHECK_TEXT)[:max(1, min(CHECK_PROMPT, limit // 2))]
    return prompt, max(1, min(CHECK_NEW, limit - len(prompt) + 1))


def uses_dynamic_scaling(pe: dict) -> bool:
    """Whether any RoPE in the PE config scales dynamically (its cached and uncached decoding differ by design)."""
    if (pe.get("scaling") or {}).get("name") == "dynamic":
        return True
    return any(uses_dynamic_scaling(m) for m in [*(pe.get("pattern") or []), *([pe["inner"]] if "inner" in pe else [])])


def first_mismatch(want_N: list[int], got_N: list[int], step_diff_N: torch.Tensor, tolerance: float) -> int | None:
    """The first step at which two greedy continuations differ, in token (a shorter one differs where it ends)
    or by more than `tolerance` in any logit (step_diff_N: max |logit difference| per common step), or None."""
    for i in range(max(len(want_N), len(got_N))):
        if i >= min(len(want_N), len(got_N), step_diff_N.shape[0]) or want_N[i] != got_N[i] \
                or not step_diff_N[i].item() <= tolerance:
            return i
    return None


def verify_generation(hf, model, prompt: list[int], n_new: int, whole_sequence: bool,
                      cache_consistent: bool = True) -> tuple[float, list[str]]:
    """Greedy continuations of `prompt` by the loaded export, transformers' `generate` with its KV cache and
    without it, against posbench's own greedy loops (posbench.evaluation.generate: cached, and re-running the
    sequence): the same tokens and per-step logits within VERIFY_TOLERANCE. Compared: cached with posbench's
    cached loop, uncached with posbench's recomputing loop, and cached with uncached. Randomized positions
    (`whole_sequence`) refuse the cache, so only uncached generation is compared there; a dynamically scaled
    RoPE (`cache_consistent` False) rotates cached keys at the length they were cached at, in posbench and in
    transformers' own dynamic RoPE alike, so its cached and uncached decodings are not compared with each
    other. Returns (max |logit difference|, notes on what was not compared); ConfigError names the first
    mismatch (the pair, the step, the tokens, the max logit difference)."""
    from posbench.evaluation.generate import greedy_cached, greedy_recompute

    prompt_BT = torch.tensor([prompt], dtype=torch.long)
    runs = {}  # name -> (tokens, logits_NV)
    for name, loop, skip in (("posbench's cached greedy loop", greedy_cached, whole_sequence),
                             ("posbench's greedy loop re-running the sequence", greedy_recompute, False)):
        if not skip:
            steps = []
            new_BN = loop(model, prompt_BT, n_new, scores=steps)
            runs[name] = (new_BN[0].tolist(), torch.stack(steps, dim=1)[0])
    for use_cache in ((False,) if whole_sequence else (True, False)):
        name = f"transformers' generate {'with' if use_cache else 'without'} its KV cache"
        try:
            with torch.no_grad():
                # eos None: posbench's loop never stops early; output_logits: the logits before any processor
                out = hf.generate(prompt_BT, max_new_tokens=n_new, do_sample=False, use_cache=use_cache,
                                  eos_token_id=None, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        except Exception as e:  # whatever the remote code or transformers raised: the export is not kept
            raise ConfigError(f"{name} failed on the exported model: {type(e).__name__}: {e}; nothing was "
                              "exported (please report this as a bug)") from e
        runs[name] = (out.sequences[0, len(prompt):].tolist(), torch.stack(out.logits, dim=1)[0].float())
    cached, uncached = "transformers' generate with its KV cache", "transformers' generate without its KV cache"
    pairs = [(uncached, "posbench's greedy loop re-running the sequence")]
    notes = []
    if whole_sequence:
        notes.append("cached generation not compared: randomized positions are drawn per whole sequence, so the "
                     "remote code refuses the KV cache; uncached generation only")
    else:
        pairs.insert(0, (cached, "posbench's cached greedy loop"))
        if cache_consistent:
            pairs.insert(0, (cached, uncached))
        else:
            notes.append("cached and uncached generation not compared with each other: dynamic RoPE scaling "
                         "keeps the rotation keys were cached with (in posbench too); each matched posbench's "
                         "loop of its kind")
    worst = 0.0
    for got_name, want_name in pairs:
        (got_N, got_NV), (want_N, want_NV) = runs[got_name], runs[want_name]
        n = min(got_NV.shape[0], want_NV.shape[0])
        step_diff_N = (got_NV[:n] - want_NV[:n]).abs().amax(dim=-1)
        diff = step_diff_N.max().item() if n else float("inf")
        tolerance = VERIFY_TOLERANCE * max(1.0, want_NV.abs().max().item())
        step = first_mismatch(want_N, got_N, step_diff_N, tolerance)
        if step is not None:
            got, want = (new_N[step] if step < len(new_N) else "none" for new_N in (got_N, want_N))
            there = f", |score difference| there {step_diff_N[step].item():.3g}" if step < n else ""
            raise ConfigError(f"the exported model's greedy generation differs: {got_name} vs {want_name}: first "
                              f"differing step {step + 1} of {n_new} (tokens {got} vs {want}{there})"
                              f", max |score difference| {diff:.3g} (tolerance {tolerance:.3g}), on a {len(prompt)}-"
                              "token prompt; nothing was exported (please report this as a bug)")
        worst = max(worst, diff)
    return worst, notes


def verify(out: Path, model, max_positions: int | None, trust_remote_code: bool, prompt: list[int], n_new: int,
           whole_sequence: bool = False, cache_consistent: bool = True) -> tuple[float, float, list[str]]:
    """Load the written directory with transformers and compare its logits with posbench's on random ids, then
    its greedy generation (verify_generation); returns (max |logit difference|, max |score difference| in
    generation, notes), ConfigError beyond VERIFY_TOLERANCE (the directory is then not kept)."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, trust_remote_code=trust_remote_code).eval()
    T = min(32, max_positions or 32)
    ids = torch.randint(0, model.cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = model(ids).logits.float(), hf(ids).logits.float()
    diff = (got - want).abs().max().item()
    if not diff <= VERIFY_TOLERANCE * max(1.0, want.abs().max().item()):
        raise ConfigError(f"the exported model's logits differ from posbench's by {diff:.3g} on random ids; "
                          "nothing was exported (please report this as a bug)")
    gen_diff, notes = verify_generation(hf, model, prompt, n_new, whole_sequence, cache_consistent)
    return diff, gen_diff, notes


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


def export(checkpoint: str | Path, out_dir: str | Path, log=print, overwrite: bool = False) -> Path:
    """Write the HF directory for `checkpoint` as out_dir (refused before writing anything when the PE or the
    model cannot be expressed, or out_dir is not empty without `overwrite`). Returns out_dir."""
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
    refuse_packing(run_cfg)  # before any file is written
    why_remote = qwen3_reason(run_cfg)
    pe = remote_pe_config(run_cfg) if why_remote else None  # refuses before any file is written
    tokenizer = DataLayout.from_config(run_cfg.data).tokenizer.build()
    whole_sequence = not supports_cache(model)
    with user_paths():  # out_dir is the user's: a file in its way, no permission to write there
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".export", dir=out.parent))
    try:
        if why_remote:
            kind = REMOTE
            remote_config(run_cfg, tokenizer, pe, whole_sequence).save_pretrained(tmp)
            state = remote_state_dict(model)
            for name in REMOTE_FILES:
                shutil.copyfile(REMOTE_DIR / name, tmp / name)
        else:
            kind = QWEN3
            qwen3_config(run_cfg, tokenizer).save_pretrained(tmp)
            state = hf_state_dict(model.state_dict(), run_cfg.model.n_layers)
        GenerationConfig(bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.bos_id, do_sample=False,
                         use_cache=not whole_sequence).save_pretrained(tmp)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        hf_tokenizer(tokenizer).save_pretrained(tmp)
        (tmp / "README.md").write_text(model_card(run_cfg, loaded.meta, loaded.path, kind, why_remote))
        (tmp / "posbench_export.json").write_text(json.dumps({"checkpoint": str(loaded.path), "pe": run_cfg.pe.name,
                                                              "architecture": kind}, indent=1))
        prompt, n_new = check_prompt(tokenizer, model.pe.max_positions)
        diff, gen_diff, notes = verify(tmp, model, model.pe.max_positions, bool(why_remote), prompt, n_new,
                                       whole_sequence, not uses_dynamic_scaling(dataclasses.asdict(run_cfg.pe)))
        with user_paths():
            make_shareable(tmp)
            place(tmp, out, overwrite)
    finally:
        remove_tree(tmp)  # gone already when it was renamed into place
    how = f"{REMOTE} (remote code: {why_remote})" if why_remote else QWEN3
    kinds = "uncached" if whole_sequence else "cached and uncached"
    log(f"exported {loaded.path} ({run_cfg.pe.name}) as {how} to {out}; max |logit difference| on random ids "
        f"{diff:.2g}; greedy generation ({n_new} tokens, {kinds}) as posbench's, max |score difference| "
        f"{gen_diff:.2g}" + "".join(f"; {note}" for note in notes))
    return out
