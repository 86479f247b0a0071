"""Recipe parity with transformers: a posbench model built with a recipe preset
(configs/recipe/) and the transformers model that defines the recipe, tiny, random weights loaded from posbench's
state dict, give the same fp32 logits (within 1e-5 of the largest |logit|) and the same greedy generation with
transformers' KV cache and posbench's. Each test also removes one piece of the recipe and shows the parity fails,
so the comparison sees that piece."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posbench.config import load_config  # noqa: E402
from posbench.interop.hf_qwen3_next import qwen3_next_config, qwen3_next_state_dict  # noqa: E402
from posbench.model.build import build_model  # noqa: E402
from posbench.presets import preset_path  # noqa: E402

TOLERANCE = 1e-5  # of the largest |logit|
T = 40


def recipe_model(recipe: str, *overrides):
    cfg = load_config([preset_path("recipe", recipe)], ["model.n_layers=3", "model.seq_len=64", *overrides],
                      model_size="nano")
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.pe, "cpu").eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # norms away from 1 and every weight perturbed: a mapping error cannot hide
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return cfg, model


def max_rel_diff(ours, theirs, ids) -> float:
    with torch.no_grad():
        want, got = ours(ids).logits, theirs(ids).logits
    return ((got - want).abs().max() / want.abs().max()).item()


def greedy(model, ids, n: int) -> list[int]:
    """posbench's greedy loop with its KV cache."""
    cache = model.new_cache()
    out, x = [], ids
    with torch.no_grad():
        for _ in range(n):
            nxt = model(x, cache=cache).logits[:, -1].argmax(-1, keepdim=True)
            out.append(int(nxt))
            x = nxt
    return out


def assert_generation_parity(ours, theirs, ids, n: int = 10):
    with torch.no_grad():
        theirs_gen = theirs.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True,
                                     eos_token_id=None, pad_token_id=0)[0, ids.shape[1]:].tolist()
    assert theirs_gen == greedy(ours, ids, n)


def qwen3_next_pair(*overrides):
    cfg, ours = recipe_model("qwen3_next", *overrides)
    hf_cfg = qwen3_next_config(cfg.model, cfg.pe)
    hf_cfg._attn_implementation = "eager"
    theirs = transformers.Qwen3NextForCausalLM(hf_cfg).eval()
    state = qwen3_next_state_dict(ours.state_dict(), cfg.model.n_layers, cfg.model.n_heads, cfg.model.tie_embeddings)
    missing, unexpected = theirs.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # the tied head is the embedding
    return cfg, ours, theirs


def test_qwen3_next_recipe_sets_gate_and_partial_rotary():
    cfg, model = recipe_model("qwen3_next")
    assert cfg.model.attention_gate == "elementwise" and cfg.pe.rotary_fraction == 0.25 and cfg.pe.theta == 1e7
    assert model.blocks[0].attn.gate.proj.weight.shape == (cfg.model.d_model, cfg.model.d_model)


def test_qwen3_next_logits_and_cached_generation_match_transformers():
    cfg, ours, theirs = qwen3_next_pair()
    ids = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, theirs, ids) <= TOLERANCE
    assert_generation_parity(ours, theirs, ids[:1, :12])


def test_qwen3_next_parity_fails_without_the_gate():
    """The same weights without the gate's sigmoid in posbench: transformers' logits no longer match."""
    cfg, ours, theirs = qwen3_next_pair()
    for block in ours.blocks:
        block.attn.gate.forward = lambda x, out: out
    ids = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, theirs, ids) > 100 * TOLERANCE


def test_qwen3_next_parity_fails_with_full_rotary():
    """Partial rotary matters: transformers rotating every channel differs from the recipe's 25%."""
    cfg, ours, theirs = qwen3_next_pair()
    hf_cfg = qwen3_next_config(cfg.model, cfg.pe)
    hf_cfg.rope_parameters["partial_rotary_factor"] = 1.0
    hf_cfg._attn_implementation = "eager"
    full = transformers.Qwen3NextForCausalLM(hf_cfg).eval()
    full.load_state_dict(theirs.state_dict())
    ids = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, full, ids) > 100 * TOLERANCE


QWEN3_NEXT_OVERRIDES = ["model.attention_gate=elementwise", "pe.name=rope", "pe.rotary_fraction=0.25", "pe.theta=1e7"]


def test_qwen3_next_recipe_exports_as_qwen3_next_with_parity(tmp_path):
    from posbench.evaluation.loading import load_model
    from posbench.interop.hf_export import QWEN3_NEXT, export
    from tests.interop.test_hf_export_remote import random_checkpoint

    run = random_checkpoint(tmp_path, *QWEN3_NEXT_OVERRIDES)
    out = export(run, tmp_path / "hf", log=lambda *_: None)  # verifies logits and cached/uncached generation
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(hf).__name__ == QWEN3_NEXT
    ours = load_model(run, "cpu").model
    ids = torch.randint(0, 257, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, hf, ids) <= TOLERANCE


def export_remote_with_parity(tmp_path, *overrides):
    """export() writes posbench's remote code and keeps it only when its logits match posbench's and its cached
    greedy generation equals its uncached one and posbench's (interop/hf_verify.py); the logits are checked here
    once more on the test's own ids."""
    from posbench.evaluation.loading import load_model
    from posbench.interop.hf_export import export
    from posbench.interop.hf_posbench import REMOTE
    from tests.interop.test_hf_export_remote import random_checkpoint

    run = random_checkpoint(tmp_path, *overrides)
    out = export(run, tmp_path / "hf", log=lambda *_: None)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, trust_remote_code=True).eval()
    assert type(hf).__name__ == REMOTE
    ours = load_model(run, "cpu").model
    ids = torch.randint(0, 257, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, hf, ids) <= TOLERANCE
    return ours, hf


@pytest.mark.parametrize("override", ["model.attention_gate=headwise", "pe.name=alibi"])
def test_a_gate_qwen3_next_cannot_carry_exports_with_remote_code(tmp_path, override):
    export_remote_with_parity(tmp_path, *QWEN3_NEXT_OVERRIDES, override)


class SwiGLUForGptOss(torch.nn.Module):
    """posbench's SwiGLU where gpt-oss's decoder layer calls its mixture of experts (which returns a pair)."""

    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp

    def forward(self, x):
        return self.mlp(x), None


def gpt_oss_pair(*overrides):
    from posbench.interop.hf_gpt_oss import gpt_oss_attention_state_dict, gpt_oss_config

    # a window of 8 keys: the inputs cross its edge many times
    cfg, ours = recipe_model("gpt_oss", "model.attention_window=[8,null]", "model.n_layers=4", *overrides)
    with torch.no_grad():  # sinks of both signs, large enough to matter
        for block in ours.blocks:
            block.attn.sinks.copy_(torch.linspace(-2, 2, cfg.model.n_heads))
    hf_cfg = gpt_oss_config(cfg.model, cfg.pe)
    hf_cfg._attn_implementation = "eager"
    theirs = transformers.GptOssForCausalLM(hf_cfg).eval()
    missing, unexpected = theirs.load_state_dict(
        gpt_oss_attention_state_dict(ours.state_dict(), cfg.model.n_layers, cfg.model.tie_embeddings), strict=False)
    assert not unexpected and all(".mlp." in k or k == "lm_head.weight" for k in missing)
    for hf_layer, block in zip(theirs.model.layers, ours.blocks, strict=True):
        hf_layer.mlp = SwiGLUForGptOss(block.mlp)
    return cfg, ours, theirs


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_gpt_oss_logits_and_cached_generation_match_transformers(kernel):
    cfg, ours, theirs = gpt_oss_pair(f"model.attention={kernel}")
    assert cfg.pe.scaling.name == "yarn" and cfg.model.attention_sinks and not cfg.model.qk_norm
    ids = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, theirs, ids) <= TOLERANCE
    assert_generation_parity(ours, theirs, ids[:1, :12], n=12)  # past the window of 8 while generating


def test_gpt_oss_parity_fails_without_the_sinks():
    cfg, ours, theirs = gpt_oss_pair()
    with torch.no_grad():
        for block in ours.blocks:
            block.attn.sinks.fill_(-1e4)  # exp(-1e4) = 0: the softmax without its sink
    ids = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, theirs, ids) > 100 * TOLERANCE


def test_gpt_oss_parity_fails_without_the_sliding_window():
    cfg, ours, theirs = gpt_oss_pair()
    for block in ours.blocks:
        block.attn.kernel.window = None
    ids = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, theirs, ids) > 100 * TOLERANCE


def gemma3_pair(*overrides, hf_edit=lambda c: None):
    from posbench.interop.hf_gemma3 import gemma3_config, gemma3_state_dict

    # a window of 8 keys and 6 layers: five local layers and the global one
    cfg, ours = recipe_model("gemma3", "model.attention_window=[8,8,8,8,8,null]", "model.n_layers=6", *overrides)
    hf_cfg = gemma3_config(cfg.model, cfg.pe)
    hf_edit(hf_cfg)
    hf_cfg._attn_implementation = "eager"
    theirs = transformers.Gemma3ForCausalLM(hf_cfg).eval()
    missing, unexpected = theirs.load_state_dict(
        gemma3_state_dict(ours.state_dict(), cfg.model.n_layers, cfg.model.tie_embeddings), strict=False)
    assert not unexpected
    assert all("post_attention_layernorm" in k or "post_feedforward_layernorm" in k or k == "lm_head.weight"
               for k in missing)
    for layer in theirs.model.layers:  # Gemma's sandwich norms: no posbench twin (interop/hf_gemma3.py)
        layer.post_attention_layernorm = layer.post_feedforward_layernorm = torch.nn.Identity()
    return cfg, ours, theirs


def test_gemma3_logits_and_cached_generation_match_transformers():
    cfg, ours, theirs = gemma3_pair()
    assert [m.theta for m in cfg.pe.pattern] == [1e4] * 5 + [1e6] and cfg.pe.pattern[-1].scaling.factor == 8
    ids = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, theirs, ids) <= TOLERANCE
    assert_generation_parity(ours, theirs, ids[:1, :12], n=12)


@pytest.mark.parametrize("piece", ["local base", "global scaling"])
def test_gemma3_parity_fails_without_a_piece(piece):
    def edit(c):
        if piece == "local base":  # every layer with the global base: no per-layer base
            c.rope_parameters["sliding_attention"]["rope_theta"] = 1e6
        else:
            c.rope_parameters["full_attention"] = {"rope_type": "default", "rope_theta": 1e6}

    cfg, ours, theirs = gemma3_pair(hf_edit=edit)
    ids = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, theirs, ids) > 100 * TOLERANCE


def test_gemma3_recipe_exports_with_remote_code_and_cached_generation(tmp_path):
    """No Gemma3ForCausalLM (sandwich norms, GeGLU): posbench's remote code, which export() loads back and holds to
    posbench's logits and to its own uncached generation."""
    from posbench.config_loader import dump_yaml
    from posbench.interop.hf_export import export
    from posbench.interop.hf_posbench import REMOTE
    from posbench.training import checkpoint as ckpt
    from tests.interop.test_hf_export_remote import TINY

    cfg = load_config([preset_path("recipe", "gemma3")], [*TINY, "model.n_layers=6",
                                                          "model.attention_window=[8,8,8,8,8,null]"],
                      model_size="nano")
    model = build_model(cfg.model, cfg.pe, "cpu")
    run = tmp_path / "run"
    run.mkdir()
    ckpt.save(run, 0, model.state_dict(), {}, {"step": 0, "tokens": 0}, dump_yaml(cfg))
    out = export(run, tmp_path / "hf", log=lambda *_: None)
    assert (out / "modeling_posbench.py").exists()
    assert transformers.AutoConfig.from_pretrained(out, trust_remote_code=True).architectures == [REMOTE]


def llama4_pair(*overrides, temperature=True, qk_norm=True):
    from posbench.interop.hf_llama4 import llama4_config, llama4_state_dict

    # floor_scale 8: the temperature steps at positions 7, 15, 23, 31, 39 of the inputs; chunks of 6 keys
    cfg, ours = recipe_model("llama4_irope", "model.n_layers=4", "model.attention_temperature.floor_scale=8",
                             "model.attention_chunk=[6,6,6,null]",
                             "model.attention_temperature.scale=0.5", *overrides)
    hf_cfg = llama4_config(cfg.model, cfg.pe)
    hf_cfg.attn_temperature_tuning = temperature
    hf_cfg.use_qk_norm = qk_norm
    hf_cfg._attn_implementation = "eager"
    theirs = transformers.Llama4ForCausalLM(hf_cfg).eval()
    missing, unexpected = theirs.load_state_dict(
        llama4_state_dict(ours.state_dict(), cfg.model.n_layers, cfg.model.n_heads, cfg.model.tie_embeddings),
        strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    return cfg, ours, theirs


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_llama4_irope_logits_and_cached_generation_match_transformers(kernel):
    cfg, ours, theirs = llama4_pair(f"model.attention={kernel}")
    assert [m.name for m in cfg.pe.pattern] == ["rope", "rope", "rope", "none"]
    ids = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, theirs, ids) <= TOLERANCE
    assert_generation_parity(ours, theirs, ids[:1, :12], n=12)  # crosses the steps at 15 and 23 while decoding


def test_llama4_irope_parity_fails_without_the_temperature():
    cfg, ours, theirs = llama4_pair(temperature=False)
    ids = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, theirs, ids) > 100 * TOLERANCE


def test_llama4_irope_parity_fails_without_the_l2_qk_norm():
    cfg, ours, theirs = llama4_pair(qk_norm=False)
    ids = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, theirs, ids) > 100 * TOLERANCE


def test_llama4_irope_parity_fails_without_the_chunks():
    cfg, ours, theirs = llama4_pair()
    for block in ours.blocks:
        block.attn.kernel.chunk = None
    ids = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, theirs, ids) > 100 * TOLERANCE


@pytest.mark.parametrize("temperature", ["llama4", "ssmax", "log_n"])
def test_llama4_irope_and_other_temperatures_export_with_remote_code(tmp_path, temperature):
    """Also a left-padded batch: each row generates as its prompt alone (chunks and temperatures count a row's
    real tokens, as posbench counts the prompt's), with sinks and a gate beside."""
    from tests.interop.test_hf_export_remote import assert_left_padding

    llama4 = ["model.attention_temperature.floor_scale=4"] if temperature == "llama4" else []
    ours, hf = export_remote_with_parity(
        tmp_path, "model.attention_sinks=true", "model.attention_gate=headwise",
        f"model.attention_temperature.name={temperature}", "pe.name=hybrid", "model.n_layers=4",
        "model.attention_chunk=[8,8,8,null]", "model.qk_norm_weight=false", "model.qk_norm_layers=positional",
        "model.attention_temperature.nope_layers_only=false", *llama4)
    assert_left_padding(hf, ours, [list(range(3, 17)), list(range(20, 29))], 10)
