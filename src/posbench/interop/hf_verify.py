"""The export check: an exported directory loaded back with transformers must compute what posbench does, on a
full forward of random ids (past every sliding window and attention chunk: `check_length`) and in a short greedy
generation with and without transformers' KV cache (the cache path is one the full forward never takes). A mismatch
is an ExportMismatchError (exit 4, as a checkpoint that cannot be used as asked): the export is not kept, and the
message says what differed, by how much, and what the user can do (a looser `--tolerance` for float noise,
posbench's own evaluation for the PE that differs)."""

from __future__ import annotations

from pathlib import Path

import torch

from posbench.data.tokenizers import Tokenizer
from posbench.errors import CheckpointError

# export check: random ids through posbench and the written directory; far above fp32 kernel noise (~1e-6),
# far below what a wrong weight or PE would give
VERIFY_TOLERANCE = 1e-3
# random ids per row of the full-forward check, and how far past each window and chunk it reaches (check_length)
CHECK_IDS = 32
# export check of decoding: CHECK_NEW greedy tokens after the checkpoint's own tokenizer's first CHECK_PROMPT
# ids of CHECK_TEXT (fewer where a bounded PE has fewer positions)
CHECK_TEXT = "The positional encoding of a transformer"
CHECK_PROMPT, CHECK_NEW = 8, 8


# a relative logit difference below this may be float32 noise (it grows with width, depth and length): a looser
# --tolerance is offered; above it, a wrong weight, position or mask (an injected x2 on ALiBi's slopes gives ~0.2)
NOISE_CEILING = 10 * VERIFY_TOLERANCE


class ExportMismatchError(CheckpointError):
    """The exported directory, loaded back, computes something else than posbench does on this checkpoint: the
    export is not kept (exit code 4: the checkpoint cannot be exported as asked)."""


def not_kept(how: str, tolerance: float, difference: float | None = None) -> str:
    """The end of a failed check's message: what happened to the export and what the user can do. `how`: the PE
    and the exported architecture (e.g. "PE `alibi` as remote code")."""
    advice = (f"this checkpoint's {how} computes differently in transformers than in posbench: evaluate it with "
              "posbench (eval.py) instead, and report this message with the checkpoint's pe.* and model.attention "
              "settings")
    if difference is not None and difference < NOISE_CEILING:  # float noise of a large model, perhaps
        advice = (f"if a relative difference of {difference:.3g} is acceptable to you (float32 noise grows with model "
                  f"size), re-run with --tolerance {difference * 2:.2g} (now {tolerance:.3g}); otherwise {advice}")
    return "; the export was not kept (nothing was written to the output directory). " + advice[0].upper() + advice[1:]


def check_prompt(tokenizer: Tokenizer, max_positions: int | None, boundary: int | None = None
                 ) -> tuple[list[int], int]:
    """The generation check's prompt ids and number of new tokens, within a bounded PE's range (the last new
    token is never fed back, so prompt + new - 1 positions are used). `boundary`: a document-starting token
    (model.packing) put in the prompt's middle, so that cached decoding continues a document begun in the
    prompt after an earlier one."""
    limit = max_positions or CHECK_PROMPT + CHECK_NEW
    prompt = tokenizer.encode(CHECK_TEXT)[:max(1, min(CHECK_PROMPT, limit // 2))]
    if boundary is not None and len(prompt) > 1:
        prompt[len(prompt) // 2] = boundary
    return prompt, max(1, min(CHECK_NEW, limit - len(prompt) + 1))


def check_length(model, max_positions: int | None) -> int:
    """Tokens per row of the full-forward check: CHECK_IDS, and past every layer's sliding window and attention chunk
    by CHECK_IDS more (a window or chunk longer than the ids is never exercised: a recipe's 8,192-token chunk agreed
    on 32 ids whatever the remote code did with it); at most the PE's positions."""
    spans = [s for block in model.blocks for s in (block.attn.kernel.window, block.attn.kernel.chunk) if s]
    T = max([CHECK_IDS, *(s + CHECK_IDS for s in spans)])
    return min(T, max_positions) if max_positions else T


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
                      cache_consistent: bool = True, tolerance: float = VERIFY_TOLERANCE,
                      how: str = "export") -> tuple[float, list[str]]:
    """Greedy continuations of `prompt` by the loaded export, transformers' `generate` with its KV cache and
    without it, against posbench's own greedy loops (posbench.evaluation.generate: cached, and re-running the
    sequence): the same tokens and per-step logits within `tolerance` (relative to the largest logit). Compared:
    cached with posbench's cached loop, uncached with posbench's recomputing loop, and cached with uncached.
    Randomized positions (`whole_sequence`) refuse the cache, so only uncached generation is compared there; a
    dynamically scaled RoPE (`cache_consistent` False) rotates cached keys at the length they were cached at, in
    posbench and in transformers' own dynamic RoPE alike, so its cached and uncached decodings are not compared
    with each other. Returns (max |logit difference|, notes on what was not compared); ExportMismatchError names
    the first mismatch (the pair, the step, the tokens, the max logit difference)."""
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
            raise ExportMismatchError(f"{name} failed on the exported model: {type(e).__name__}: {e}"
                                      + not_kept(how, tolerance)) from e
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
        allowed = tolerance * max(1.0, want_NV.abs().max().item())
        step = first_mismatch(want_N, got_N, step_diff_N, allowed)
        if step is not None:
            got, want = (new_N[step] if step < len(new_N) else "none" for new_N in (got_N, want_N))
            there = f", |score difference| there {step_diff_N[step].item():.3g}" if step < n else ""
            raise ExportMismatchError(
                f"the exported model's greedy generation differs: {got_name} vs {want_name}: first differing step "
                f"{step + 1} of {n_new} (tokens {got} vs {want}{there}), max |score difference| {diff:.3g} "
                f"(tolerance {allowed:.3g}), on a {len(prompt)}-token prompt"
                + not_kept(how, tolerance, diff / max(1.0, want_NV.abs().max().item())))
        worst = max(worst, diff)
    return worst, notes


def verify(out: Path, model, max_positions: int | None, trust_remote_code: bool, prompt: list[int], n_new: int,
           whole_sequence: bool = False, cache_consistent: bool = True, boundary: int | None = None,
           tolerance: float = VERIFY_TOLERANCE) -> tuple[float, float, list[str]]:
    """Load the written directory with transformers and compare its logits with posbench's on random ids, then
    its greedy generation (verify_generation); returns (max |logit difference|, max |score difference| in
    generation, notes), ExportMismatchError beyond `tolerance` (the directory is then not kept). `boundary`: the
    token that starts a document (model.packing), put into the random ids so that each row holds several."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, trust_remote_code=trust_remote_code).eval()
    T = check_length(model, max_positions)
    ids = torch.randint(0, model.cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    if boundary is not None:  # row 0: three documents, row 1: two, starting at different places
        ids[0, T // 3], ids[0, 2 * T // 3], ids[1, T // 2] = boundary, boundary, boundary
    with torch.no_grad():
        want, got = model(ids).logits.float(), hf(ids).logits.float()
    diff = (got - want).abs().max().item()
    how = f"PE `{model.pe.name}` as {'remote code (modeling_posbench.py)' if trust_remote_code else 'Qwen3'}"
    scale = max(1.0, want.abs().max().item())
    if not diff <= tolerance * scale:
        raise ExportMismatchError(f"the exported model's logits differ from posbench's by {diff:.3g} on random ids "
                                  f"(tolerance {tolerance * scale:.3g})" + not_kept(how, tolerance, diff / scale))
    gen_diff, notes = verify_generation(hf, model, prompt, n_new, whole_sequence, cache_consistent, tolerance, how)
    return diff, gen_diff, notes
