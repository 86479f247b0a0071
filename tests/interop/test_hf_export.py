"""Export to transformers: a posbench checkpoint against the exported Qwen3ForCausalLM, loaded by transformers
with no remote code, on the same random ids (max |logit difference| <= 1e-4 in fp32) and the same 32 greedy
tokens, with transformers' KV cache and without, as posbench's greedy loops (scores within 1e-4); the exported
tokenizer gives posbench's ids. Other PEs: test_hf_export_remote.py (which uses the generation helpers here)."""

import random
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posbench.config import load_config  # noqa: E402
from posbench.data.tokenizers import TokenizerConfig, build_tokenizer  # noqa: E402
from posbench.evaluation.generate import greedy_cached, greedy_generate, greedy_recompute  # noqa: E402
from posbench.evaluation.loading import load_model  # noqa: E402
from posbench.interop.hf_export import export  # noqa: E402
from posbench.interop.hf_tokenizer import hf_tokenizer  # noqa: E402
from posbench.training.batch_sources import build_stream  # noqa: E402
from posbench.training.loop import train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCORE_TOLERANCE = 1e-4  # fp32: kernel noise is ~1e-6, a wrong position or a lost cache entry is far above


def hf_greedy(hf, prompt_BT, n_new: int, use_cache: bool, **kw) -> tuple[list[list[int]], torch.Tensor]:
    """transformers' greedy generate: (new tokens per row, scores (B, N, V))."""
    out = hf.generate(prompt_BT, max_new_tokens=n_new, do_sample=False, use_cache=use_cache, output_scores=True,
                      return_dict_in_generate=True, eos_token_id=None, pad_token_id=0, **kw)
    return out.sequences[:, prompt_BT.shape[1]:].tolist(), torch.stack(out.scores, dim=1).float()


def ours_greedy(model, prompt_BT, n_new: int, cached: bool) -> tuple[list[list[int]], torch.Tensor]:
    """posbench's greedy loop, with its KV cache or re-running the sequence: (new tokens, logits (B, N, V))."""
    steps = []
    new_BN = (greedy_cached if cached else greedy_recompute)(model, prompt_BT, n_new, scores=steps)
    return new_BN.tolist(), torch.stack(steps, dim=1)


def max_diff(a, b) -> float:
    assert a.shape == b.shape
    return (a - b).abs().max().item()


def assert_generation_parity(hf, ours, prompt: list[int], n_new: int, cache: bool = True,
                             cache_consistent: bool = True) -> float:
    """transformers' generate with its KV cache == without it == posbench's greedy loop (greedy_generate, what the
    evaluation uses), token for token, scores within SCORE_TOLERANCE. cache=False: the model refuses the cache
    (randomized positions); cache_consistent=False: cached and uncached decoding differ by design (dynamic RoPE
    scaling), each is held to posbench's loop of its kind. Returns the largest score difference."""
    prompt_BT = torch.tensor([prompt])
    (ours_new,) = greedy_generate(ours, [prompt], [n_new], torch.device("cpu"))
    uncached, uncached_scores = hf_greedy(hf, prompt_BT, n_new, use_cache=False)
    ours_re, ours_re_scores = ours_greedy(ours, prompt_BT, n_new, cached=False)
    assert uncached == ours_re
    worst = max_diff(uncached_scores, ours_re_scores)
    if not cache:
        assert uncached[0] == ours_new
        with pytest.raises(ValueError, match="use_cache=False"):
            hf_greedy(hf, prompt_BT, n_new, use_cache=True)
        assert worst <= SCORE_TOLERANCE
        return worst
    cached, cached_scores = hf_greedy(hf, prompt_BT, n_new, use_cache=True)
    ours_c, ours_c_scores = ours_greedy(ours, prompt_BT, n_new, cached=True)
    assert cached == ours_c and cached[0] == ours_new
    worst = max(worst, max_diff(cached_scores, ours_c_scores))
    if cache_consistent:
        assert cached == uncached
        worst = max(worst, max_diff(cached_scores, uncached_scores))
    assert worst <= SCORE_TOLERANCE
    return worst


def checkpoint(tmp_path: Path, pe: str, *extra) -> Path:
    """A nano checkpoint (a few steps on random tokens), every weight then perturbed so that no norm weight is
    still 1 and no mapping error can hide behind a symmetric value."""
    overrides = ["model.seq_len=64", "model.vocab_size=300", "model.n_layers=2", "data.tokenizer.name=bytes",
                 "train.stream=random", "train.budget_unit=tokens", "train.target_budgets=[1024]",
                 "train.global_batch_tokens=512", "train.micro_batch=4", "train.eval_interval=0",
                 "logging.wandb=disabled", "schedule.warmup_tokens=0", f"train.out_dir={tmp_path / 'runs'}",
                 f"train.run_name={pe}", *extra]
    cfg = load_config(model_size="nano", overrides=overrides, pe_type=pe)
    run = Path(train(cfg, build_stream(cfg))["run_dir"])
    model_pt = (run / "latest").resolve() / "model.pt"
    state = torch.load(model_pt, weights_only=True)
    g = torch.Generator().manual_seed(1)
    torch.save({k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in state.items()}, model_pt)
    return run


@pytest.mark.parametrize("pe,extra", [
    ("rope", []),
    ("rope", ["pe.scaling.name=pi", "pe.scaling.factor=2"]),
    ("rope", ["pe.scaling.name=yarn", "pe.scaling.factor=4"]),
    ("none", []),
])
def test_exported_model_equals_posbench(tmp_path, pe, extra):
    run = checkpoint(tmp_path, pe, *extra)
    out = export(run, tmp_path / "hf", log=lambda *_: None)
    assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors", "generation_config.json",
                                               "tokenizer.json", "README.md"}
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(hf).__name__ == "Qwen3ForCausalLM"
    ours = load_model(run, "cpu").model
    ids = torch.randint(0, 257, (2, 100), generator=torch.Generator().manual_seed(0))  # past seq_len 64 too
    with torch.no_grad():
        want = ours(ids).logits
        got = hf(ids).logits
    assert got.shape == want.shape and (got - want).abs().max().item() <= 1e-4
    assert_generation_parity(hf, ours, ids[0, :20].tolist(), 32)
    card = (out / "README.md").read_text()
    assert f"positional encoding `{pe}`" in card and "## Training configuration" in card


def test_exported_tokenizer_gives_the_same_ids(tmp_path):
    from posbench.data.bpe_train import train_bpe

    rng = random.Random(0)
    words = ["the", "positional", "encoding", "Ünïcode", "naïve", "12345", "x=1;", "tab\there", "ok!!", "  spaced"]
    docs = [" ".join(rng.choice(words) for _ in range(60)) + "\n" for _ in range(200)]
    sample = "The naïve positional encoding, 2024: 12345 tokens\t(tabs) and  spaces; Ünïcode ✓ ok!!\n\nend"
    bpe_cfg = TokenizerConfig.registry_lookup("bpe")(name="bpe", vocab_size=300, path=str(tmp_path / "bpe"))
    train_bpe(bpe_cfg, docs, tmp_path / "bpe", trained_on="test", log=lambda *_: None)
    for tok in (build_tokenizer(bpe_cfg, tmp_path / "bpe"),
                build_tokenizer(TokenizerConfig.registry_lookup("bytes")(name="bytes"), tmp_path)):
        fast = hf_tokenizer(tok)
        for text in (sample, *docs[:5]):
            assert fast.encode(text, add_special_tokens=False) == tok.encode(text), tok.name
        assert fast.convert_tokens_to_ids("<|bos|>") == tok.bos_id
        saved = tmp_path / f"saved_{tok.name}"
        fast.save_pretrained(saved)
        again = transformers.PreTrainedTokenizerFast.from_pretrained(saved)
        assert again.encode(sample, add_special_tokens=False) == tok.encode(sample)


def test_scaled_token_embeddings_take_the_remote_code_path():
    """Qwen3 never scales its token embeddings, so a model.embed_scale=sqrt_d RoPE model is not a Qwen3 model:
    it goes through modeling_posbench.py (its parity is in test_hf_export_remote.py)."""
    from posbench.interop.hf_refusals import qwen3_reason

    assert qwen3_reason(load_config(model_size="nano", pe_type="rope")) is None
    reason = qwen3_reason(load_config(model_size="nano", pe_type="rope", overrides=["model.embed_scale=sqrt_d"]))
    assert reason and "model.embed_scale=sqrt_d has no counterpart in Qwen3" in reason
