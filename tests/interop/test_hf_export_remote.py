"""Export through remote code (the decoder shell and posbench's own PE modules): for PEs with options (RoPE
scalings, model options Qwen3 cannot express; every registered PE at its defaults is in test_hf_export_parity.py), a
tiny random checkpoint is exported, loaded by transformers with trust_remote_code, and compared with posbench: max
|logit difference| <= 1e-4 in fp32 on random ids; the same 32 greedy tokens from transformers' generate with its KV
cache, without it and posbench's greedy loop, scores within 1e-4; a left-padded batch generates each row as alone
(or is refused where the PE's positions are drawn per sequence). The export check refuses a model whose cache path
is broken though its logits agree. Bad input: what cannot be expressed is refused before anything is written, with
one line on stderr; a PE config posbench would refuse is refused when the export is loaded."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posbench.config import load_config  # noqa: E402
from posbench.config_loader import dump_yaml  # noqa: E402
from posbench.errors import ConfigError  # noqa: E402
from posbench.evaluation.loading import load_model  # noqa: E402
from posbench.interop.hf_export import export  # noqa: E402
from posbench.interop.hf_posbench import REMOTE_FILES  # noqa: E402
from posbench.model.build import build_model  # noqa: E402
from posbench.training import checkpoint as ckpt  # noqa: E402
from tests.interop.test_hf_export import SCORE_TOLERANCE, assert_generation_parity, hf_greedy, max_diff, ours_greedy  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = ["model.d_model=32", "model.n_heads=4", "model.n_layers=2", "model.d_ff=64", "model.seq_len=64",
        "model.vocab_size=300", "data.tokenizer.name=bytes"]


def random_checkpoint(tmp_path: Path, *overrides, name="run") -> Path:
    """A checkpoint straight from random init, every parameter then perturbed, so that zero-initialised PE
    tables (T5, clipped bias) and unit norm weights carry values a mapping error could not hide behind."""
    cfg = load_config(model_size="nano", overrides=[*TINY, *overrides])
    model = build_model(cfg.model, cfg.pe, "cpu")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    run = tmp_path / name
    run.mkdir()
    ckpt.save(run, 0, model.state_dict(), {}, {"step": 0, "tokens": 0}, dump_yaml(cfg))
    return run


CASES = {
    "alibi": ["pe.name=alibi"], "t5": ["pe.name=t5"], "t5_per_layer": ["pe.name=t5", "pe.per_layer=true"],
    "kerple_log": ["pe.name=kerple_log"], "kerple_power": ["pe.name=kerple_power"], "fire": ["pe.name=fire"],
    "relative_learned": ["pe.name=relative_learned", "pe.max_distance=8"],
    "learned": ["pe.name=learned"], "learned_ln": ["pe.name=learned", "pe.layer_norm=true", "pe.scale=2"],
    "sininit": ["pe.name=sininit"], "sinusoidal": ["pe.name=sinusoidal"], "sinonly": ["pe.name=sinonly"],
    "binary": ["pe.name=binary"], "binary_norm": ["pe.name=binary_norm"], "decimal": ["pe.name=decimal"],
    "decimal_norm": ["pe.name=decimal_norm"], "integer": ["pe.name=integer"],
    "xpos": ["pe.name=xpos", "pe.scale_base=16"], "lrope": ["pe.name=lrope"], "prope": ["pe.name=prope"],
    "rope_ntk": ["pe.name=rope", "pe.scaling.name=ntk", "pe.scaling.factor=2"],
    "rope_dynamic": ["pe.name=rope", "pe.scaling.name=dynamic", "pe.scaling.factor=2",
                     "pe.scaling.original_max_positions=16"],
    "rope_yarn_paper": ["pe.name=rope", "pe.scaling.name=yarn_paper", "pe.scaling.factor=4"],
    "lrope_yarn": ["pe.name=lrope", "pe.scaling.name=yarn", "pe.scaling.factor=4"],
    "rope_untied": ["pe.name=rope", "model.tie_embeddings=false"],
    "none_no_qk_norm": ["pe.name=none", "model.qk_norm=false"],
    "hybrid": ["pe.name=hybrid", "pe.pattern=[{name: rope}, {name: none}]"],
    "hybrid_bias": ["pe.name=hybrid", "pe.pattern=[{name: alibi}, {name: kerple_log, per_layer: true}]"],
    "randomized": ["pe.name=randomized"],
    "randomized_learned_dense": ["pe.name=randomized", "pe.inner={name: learned}", "pe.sample_at_eval=false"],
    # the reference framework's definitions: digits most significant first, embeddings x sqrt(d)
    "binary_reference": ["pe.name=binary", "pe.layout=reference", "model.embed_scale=sqrt_d"],
    "decimal_norm_reference": ["pe.name=decimal_norm", "pe.layout=reference", "model.embed_scale=sqrt_d"],
    "rope_sqrt_d": ["pe.name=rope", "model.embed_scale=sqrt_d"],
    # sliding windows shorter than the 20-token prompt: cached generation must mask the keys that left the window
    "rnope_swa": ["pe.name=rnope_swa", "pe.window=8", "pe.swa_layers=1"],
    "rope_window": ["pe.name=rope", "model.attention_window=[6,null]"],
    "alibi_window": ["pe.name=alibi", "model.attention_window=5"],
    "drope": ["pe.name=drope"],
    # a dropped DroPE is NoPE on the same weights and exports as Qwen3 (test_a_dropped_drope_checkpoint_exports_...)
    # the rotary family of 2024-2026: partial rotary, Llama 3.1 / LongRoPE scalings, half-truncated, HoPE, FoPE, PoPE
    "rope_partial": ["pe.name=rope", "pe.rotary_fraction=0.5"],
    "xpos_partial": ["pe.name=xpos", "pe.scale_base=16", "pe.rotary_fraction=0.5"],
    "lrope_partial": ["pe.name=lrope", "pe.rotary_fraction=0.5"],
    "rope_llama3": ["pe.name=rope", "pe.scaling.name=llama3", "pe.scaling.factor=4",
                    "pe.scaling.original_max_positions=32"],
    "rope_longrope": ["pe.name=rope", "pe.scaling.name=longrope", "pe.scaling.factor=4",
                      "pe.scaling.original_max_positions=16", "pe.scaling.short_factor=[1.0, 1.5, 2.0, 3.0]",
                      "pe.scaling.long_factor=[1.0, 2.0, 4.0, 8.0]"],
    "modded_rope": ["pe.name=modded_rope"], "hope": ["pe.name=hope"], "fope": ["pe.name=fope"],
    "fope_partial_yarn": ["pe.name=fope", "pe.rotary_fraction=0.5", "pe.scaling.name=yarn", "pe.scaling.factor=2"],
    "fope_shared_norm": ["pe.name=fope", "pe.fourier_shared=true", "pe.fourier_norm=true"],
    "pope": ["pe.name=pope"],
    # data-dependent: FoX's log forget gates ride in the cache with their keys; CoPE with positions clamped
    "fox": ["pe.name=fox"], "cope": ["pe.name=cope"], "cope_shared_clamped": ["pe.name=cope", "pe.npos_max=6",
                                                                              "pe.shared=true"],
    "hybrid_fox_cope": ["pe.name=hybrid", "pe.pattern=[{name: fox}, {name: cope}]"],
    # CABLE's per-token terms ride in the cache as FoX's gates; stick-breaking's weights with the current key's beta
    "cable": ["pe.name=cable"], "stick_breaking_attend_current": ["pe.name=stick_breaking", "pe.attend_current=true"],
    "stick_breaking_window": ["pe.name=stick_breaking", "model.attention_window=5"],
    # PaTH: each token's w projection and beta ride in the cache as K + 1 channels beside its key
    "path": ["pe.name=path"], "path_window": ["pe.name=path", "model.attention_window=5"],
}


# randomized positions are drawn per whole sequence: no KV cache (the remote code refuses it), no padding
NO_CACHE = {"randomized"}
# dynamic NTK rescales every frequency with the current length, so keys cached at a shorter length keep their
# old rotation (posbench's model and transformers' own dynamic RoPE alike): its cached decoding is compared with
# posbench's cached loop, its uncached with posbench's recomputing loop, not with each other
CACHE_INCONSISTENT = {"rope_dynamic", "rope_longrope"}
# a padded batch is refused only where positions are drawn per sequence; every other PE computes each row on its
# real tokens alone, those whose frequencies follow the longest position (dynamic, longrope) and PaTH, whose w
# convolution reads the tokens before, included
NO_PADS = NO_CACHE


def assert_left_padding(hf, ours, prompts: list[list[int]], n_new: int):
    """A left-padded batch (attention_mask 0 on pads) generates, with the KV cache, each row's tokens as that
    prompt alone through posbench's greedy loop, scores within SCORE_TOLERANCE."""
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    new, scores_BNV = hf_greedy(hf, ids, n_new, use_cache=True, attention_mask=mask)
    for row, prompt in enumerate(prompts):
        want, want_scores = ours_greedy(ours, torch.tensor([prompt]), n_new, cached=True)
        assert new[row] == want[0], f"row {row}"
        assert max_diff(scores_BNV[row:row + 1], want_scores) <= SCORE_TOLERANCE, f"row {row}"


def assert_remote_files_stand_alone(out: Path):
    """The remote files never import posbench (nor a test module) absolutely, as transformers' own loader reads
    them: the decoder shell imports torch, transformers and its own files, the shipped PE modules each other; and
    the modeling file reaches every one of them through the relative imports that loader follows (it copies only
    those)."""
    from transformers.dynamic_module_utils import get_imports, get_relative_import_files

    files = {p.name for p in out.glob("*.py")}
    assert set(REMOTE_FILES) | {"pe_zoo.py", "pe_encoding.py", "errors.py"} <= files
    for name in files:
        imports = set(get_imports(out / name))
        assert not imports & {"posbench", "tests"}, name
        if name in REMOTE_FILES:
            assert imports <= {"__future__", "collections", "dataclasses", "math", "torch", "transformers"}, name
    reached = {Path(f).name for f in get_relative_import_files(out / "modeling_posbench.py")}
    assert reached | {"modeling_posbench.py"} == files


@pytest.mark.parametrize("case", sorted(CASES))
def test_remote_code_export_equals_posbench(tmp_path, case):
    run = random_checkpoint(tmp_path, *CASES[case])
    logs = []
    out = export(run, tmp_path / "hf", log=logs.append)
    assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors", "generation_config.json",
                                               "tokenizer.json", "README.md", *REMOTE_FILES}
    assert {"modeling_posbench.py", "configuration_posbench.py"} <= set(REMOTE_FILES)
    assert_remote_files_stand_alone(out)
    assert json.loads((out / "config.json").read_text())["auto_map"]["AutoModelForCausalLM"] == \
        "modeling_posbench.PosbenchForCausalLM"
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, trust_remote_code=True).eval()
    assert type(hf).__name__ == "PosbenchForCausalLM"
    ours = load_model(run, "cpu").model
    T = min(100, ours.pe.max_positions or 100)  # past the training length 64 where the PE is defined there
    ids = torch.randint(0, 257, (2, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = ours(ids).logits, hf(ids).logits
    diff = (got - want).abs().max().item()
    print(f"PARITY {case}: max|dlogit|={diff:.3g}")
    assert got.shape == want.shape and diff <= 1e-4
    gen_diff = assert_generation_parity(hf, ours, ids[0, :20].tolist(), 32, cache=case not in NO_CACHE,
                                        cache_consistent=case not in CACHE_INCONSISTENT)
    print(f"GENERATION {case}: max|dscore|={gen_diff:.3g}")
    prompts = [ids[0, :20].tolist(), ids[1, :13].tolist()]
    assert hf.whole_sequence == (case in NO_CACHE)
    if case in NO_PADS:
        with pytest.raises(ValueError, match="cannot take a padded batch"):
            hf_greedy(hf, torch.tensor([prompts[0], [0] * 7 + prompts[1]]), 4, use_cache=case not in NO_CACHE,
                      attention_mask=torch.tensor([[1] * 20, [0] * 7 + [1] * 13]))
    else:
        assert_left_padding(hf, ours, prompts, 16)
    assert "trust_remote_code=True" in (out / "README.md").read_text()
    if case in NO_CACHE:
        assert "cached generation not compared" in " ".join(logs)


# bugs in the cache path only: the full forward (no history in the cache) is untouched, so the logit check passes
BROKEN_CACHE_PATHS = {
    # a new token's positions restart at 0 instead of following the cached ones: a plain mismatch
    "positions_restart": ("        pos_BT = pos_BS[..., offset:]\n",
                          "        pos_BT = pos_BS[..., :T]  # injected bug\n",
                          r"greedy generation differs: transformers' generate with its KV cache vs .*: first "
                          r"differing step \d+ of 8 \(tokens \d+ vs \d+, \|score difference\| there [0-9.e+-]+\), "
                          r"max \|score difference\| [0-9.e+-]+ \(tolerance"),
    # history dropped once the cache holds any, what transformers' rename of `past_key_values` to `cache` did
    # to the remote code before it read `cache`: the mask (5.0 always passes one) or generate's position_ids
    # (newer 5.x drop an all-ones mask) then disagree with the empty cache, and the forward refuses them
    "history_dropped": ("        if use_cache and cache is None:\n",
                        "        if cache is not None and cache.get_seq_length() > 0:  # injected bug\n"
                        "            cache = DynamicCache(config=self.config)\n"
                        "        if use_cache and cache is None:\n",
                        r"transformers' generate with its KV cache failed on the exported model: ValueError: "
                        r"(position_ids must be the token indices|attention_mask must be 2D \(batch, cached \+ new "
                        r"tokens\) = \(1, 1\), got shape \(1, 9\))"),
}


@pytest.mark.parametrize("bug", sorted(BROKEN_CACHE_PATHS))
def test_export_check_rejects_a_model_whose_cache_path_is_broken(tmp_path, monkeypatch, bug):
    """A remote-code bug only cached decoding meets agrees on random-id logits but not in greedy generation:
    the export is refused, the error says what differed, and nothing is written."""
    from posbench.interop import hf_posbench

    target, injected, error = BROKEN_CACHE_PATHS[bug]
    broken = tmp_path / "remote"
    broken.mkdir()
    for name in hf_posbench.REMOTE_FILES:
        shutil.copyfile(hf_posbench.REMOTE_DIR / name, broken / name)
    source = (broken / "modeling_posbench.py").read_text()
    assert source.count(target) == 1
    (broken / "modeling_posbench.py").write_text(source.replace(target, injected))
    monkeypatch.setattr(hf_posbench, "REMOTE_DIR", broken)
    run = random_checkpoint(tmp_path, "pe.name=alibi")
    with pytest.raises(ConfigError, match=error):
        export(run, tmp_path / "hf", log=lambda *_: None)
    assert not (tmp_path / "hf").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hf.")]  # the staging directory is gone


@pytest.mark.parametrize("case", ["alibi", "learned"])
def test_remote_forward_takes_the_cache_under_either_name(tmp_path, case):
    """transformers 5.0 hands the cache over as `past_key_values`, newer releases as `cache`: a model exported
    today decodes alike under both; positions other than the token indices are refused, not ignored."""
    run = random_checkpoint(tmp_path, *CASES[case])
    out = export(run, tmp_path / "hf", log=lambda *_: None)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, trust_remote_code=True).eval()
    ids = torch.randint(0, 257, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = hf(ids, use_cache=False).logits
        for name in ("cache", "past_key_values"):
            first = hf(ids[:, :8], use_cache=True)
            step = first.logits
            cache = first["cache"] if "cache" in first else first["past_key_values"]
            for t in range(8, 12):
                out_t = hf(ids[:, t:t + 1], use_cache=True, **{name: cache})
                step = torch.cat((step, out_t.logits), dim=1)
            assert (step - full).abs().max().item() <= SCORE_TOLERANCE, name
        with pytest.raises(ValueError, match="position_ids must be the token indices"):
            hf(ids, position_ids=torch.arange(5, 17)[None])
        with pytest.raises(ValueError, match="not both"):
            hf(ids, cache=transformers.DynamicCache(), past_key_values=transformers.DynamicCache())


def test_an_architecture_that_cannot_be_expressed_is_refused_before_writing(tmp_path):
    cfg = load_config(model_size="nano", overrides=[*TINY, "pe.name=none", "model.arch.name=mamba"])
    from posbench.interop.hf_posbench import remote_pe_config

    with pytest.raises(ConfigError, match="model.arch=mamba is not a decoder-only transformer"):
        remote_pe_config(cfg)


def run_export(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "export_hf.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_missing_or_corrupt_checkpoint_is_one_line(tmp_path):
    proc = run_export(tmp_path / "nowhere", tmp_path / "hf")
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1 and "no such checkpoint" in proc.stderr
    run = random_checkpoint(tmp_path, "pe.name=alibi")
    (run / "latest" / "model.pt").write_bytes(b"not a torch file")
    proc = run_export(run, tmp_path / "hf")
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1 and "cannot be read as model weights" in proc.stderr
    assert not (tmp_path / "hf").exists()


def test_missing_tokenizer_is_one_line(tmp_path):
    run = random_checkpoint(tmp_path, "pe.name=alibi", "data.tokenizer.name=bpe",
                            f"data.tokenizer.path={tmp_path / 'no_bpe'}")
    proc = run_export(run, tmp_path / "hf")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert not (tmp_path / "hf").exists()


def test_cli_exports_a_pe_qwen3_cannot_express_as_remote_code_not_as_qwen3(tmp_path):
    run = random_checkpoint(tmp_path, "pe.name=alibi")
    proc = run_export(run, tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr
    assert "as PosbenchForCausalLM (remote code: PE `alibi` has no architecture in transformers" in proc.stdout
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["PosbenchForCausalLM"] and config["model_type"] == "posbench"
    assert config["pe"] == {"name": "alibi", "per_layer": False}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hf.")]  # the staging directory is gone


def test_the_tokenizer_of_a_remote_code_export_loads_without_remote_code(tmp_path):
    """AutoTokenizer reads config.json first (model type `posbench`, remote code): without trust_remote_code it
    stops at transformers' prompt. The tokenizer is a standard fast tokenizer that its own class loads with no
    remote code, no prompt and no model-type warning; the model card gives both loads."""
    out = export(random_checkpoint(tmp_path, "pe.name=alibi"), tmp_path / "hf", log=lambda *_: None)
    probe = ("import transformers, sys; t = transformers.PreTrainedTokenizerFast.from_pretrained(sys.argv[1]); "
             "print(t.encode('hi <|bos|>', add_special_tokens=False))")
    proc = subprocess.run([sys.executable, "-c", probe, str(out)], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[104, 105, 32, 256]"  # bytes, then <|bos|>: the ids posbench trained with
    assert "custom code" not in proc.stdout + proc.stderr and "model of type" not in proc.stderr
    card = (out / "README.md").read_text()
    assert "PreTrainedTokenizerFast.from_pretrained(path)  # no remote code" in card
    assert "AutoTokenizer.from_pretrained(path, trust_remote_code=True)" in card


def test_a_dropped_drope_checkpoint_exports_as_standard_qwen3(tmp_path):
    """DroPE after its drop is a NoPE on the same weights: a Qwen3 directory (no remote code), as NoPE is."""
    run = random_checkpoint(tmp_path, "pe.name=drope", "pe.dropped=true")
    meta = run / "step_00000000" / "meta.json"  # as training writes it at the drop (training/meta.py)
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "pe_dropped_at_tokens": 0}))
    out = export(run, tmp_path / "hf", log=lambda *_: None)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and not (out / "modeling_posbench.py").exists()
    assert "DroPE after its drop" in (out / "README.md").read_text()


@pytest.fixture(scope="module")
def alibi_export(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("alibi")
    return export(random_checkpoint(tmp, "pe.name=alibi"), tmp / "hf", log=lambda *_: None)


@pytest.mark.parametrize("cfg, error", [
    ({"name": "t5", "num_buckets": 32, "bogus": True}, "unknown config key `pe.bogus` for Config"),
    ({"name": "not_a_pe"}, "unknown positional encoding `not_a_pe` at pe"),
    ({"name": "randomized", "inner": {"name": "rope", "bogus": 1}}, "unknown config key `pe.inner.bogus`"),
    ({"name": "rnope_swa", "window": 4, "swa_layers": 3, "rope": {"name": "rope", "bogus": 1}},
     "unknown config key `pe.rope.bogus`"),
    ({"name": "rope", "scaling": {"name": "pi", "factor": 2.0, "bogus": 1}}, "unknown config key `pe.scaling.bogus`"),
    ({"name": "hybrid", "pattern": [{"name": "rope"}, {"name": "alibi", "bogus": 1}]},
     r"unknown config key `pe.pattern\[1\].bogus`"),
])
def test_the_remote_code_refuses_a_pe_config_posbench_would_refuse(alibi_export, tmp_path, cfg, error):
    """config.json's PE goes through posbench's own strict loader: an unknown PE or option, nested ones included,
    is refused when the model is loaded, never read as a silently different model."""
    out = tmp_path / "edited"
    shutil.copytree(alibi_export, out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "pe": cfg}))
    with pytest.raises(Exception, match=error) as refused:
        transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, trust_remote_code=True)
    assert type(refused.value).__name__ == "ConfigError"  # the shipped copy of posbench's errors.ConfigError
