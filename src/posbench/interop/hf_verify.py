"""The export check: an exported directory loaded back with transformers must compute what posbench does, on a
full forward of random ids and in a short greedy generation with and without transformers' KV cache (the
cache path is one the full forward never takes). A mismatch is a ConfigError and the export is not kept."""

from __future__ import annotations

from pathlib import Path

import torch

from posbench.config_loader import ConfigError
from posbench.data.tokenizers import Tokenizer

# export check: random ids through posbench and the written directory; far above fp32 kernel noise (~1e-6),
# far below what a wrong weight or PE would give
VERIFY_TOLERANCE = 1e-3
# export check of decoding: CHECK_NEW greedy tokens after the checkpoint's own tokenizer's first CHECK_PROMPT
# ids of CHECK_TEXT (fewer where a bounded PE has fewer positions)
CHECK_TEXT = "The positional encoding of a transformer"
CHECK_PROMPT, CHECK_NEW = 8, 8


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
           whole_sequence: bool = False, cache_consistent: bool = True, boundary: int | None = None
           ) -> tuple[float, float, list[str]]:
    """Load the written directory with transformers and compare its logits with posbench's on random ids, then
    its greedy generation (verify_generation); returns (max |logit difference|, max |score difference| in
    generation, notes), ConfigError beyond VERIFY_TOLERANCE (the directory is then not kept). `boundary`: the
    token that starts a document (model.packing), put into the random ids so that each row holds several."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, trust_remote_code=trust_remote_code).eval()
    T = min(32, max_positions or 32)
    ids = torch.randint(0, model.cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    if boundary is not None:  # row 0: three documents, row 1: two, starting at different places
        ids[0, T // 3], ids[0, 2 * T // 3], ids[1, T // 2] = boundary, boundary, boundary
    with torch.no_grad():
        want, got = model(ids).logits.float(), hf(ids).logits.float()
    diff = (got - want).abs().max().item()
    if not diff <= VERIFY_TOLERANCE * max(1.0, want.abs().max().item()):
        raise ConfigError(f"the exported model's logits differ from posbench's by {diff:.3g} on random ids; "
                          "nothing was exported (please report this as a bug)")
    gen_diff, notes = verify_generation(hf, model, prompt, n_new, whole_sequence, cache_consistent)
    return diff, gen_diff, notes
