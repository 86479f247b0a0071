"""A gpt_oss-recipe checkpoint exported as transformers' own GptOssForCausalLM (no remote code): one expert always
routed, swiglu_alpha 1, an unreachable swiglu_limit and up-projection bias -1 make gpt-oss's clamped GLU exactly
posbench's SwiGLU (interop/hf_gpt_oss.py)."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tests.interop.test_recipe_parity import TOLERANCE, T, max_rel_diff, recipe_model  # noqa: E402


def test_gpt_oss_native_model_equals_posbench_with_its_mlp():
    """Item 9: the whole posbench gpt_oss model, MLP included, mapped onto GptOssForCausalLM gives the
    same logits (the parity test used to swap the MLP out)."""
    from posbench.interop.hf_gpt_oss import gpt_oss_native_config, gpt_oss_state_dict

    cfg, ours = recipe_model("gpt_oss", "model.attention_window=[8,null]", "model.n_layers=4")
    hf_cfg = gpt_oss_native_config(cfg.model, cfg.pe)
    hf_cfg._attn_implementation = "eager"
    theirs = transformers.GptOssForCausalLM(hf_cfg).eval()
    missing, unexpected = theirs.load_state_dict(
        gpt_oss_state_dict(ours.state_dict(), cfg.model.n_layers, cfg.model.tie_embeddings), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied: the head is the embedding
    ids = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, theirs, ids) <= TOLERANCE


def test_gpt_oss_recipe_checkpoint_exports_natively(tmp_path):
    """Item 9: export() writes a gpt_oss-recipe checkpoint as GptOssForCausalLM, loadable without
    trust_remote_code, with posbench's logits."""
    from posbench.evaluation.loading import load_model
    from posbench.interop.hf_export import export
    from tests.interop.test_hf_export_remote import random_checkpoint

    run = random_checkpoint(tmp_path, "model.attention_sinks=true", "model.qk_norm=false",
                            "model.attention_window=[8,null]", "pe.name=rope", "pe.scaling.name=yarn",
                            "pe.scaling.factor=4")
    out = export(run, tmp_path / "hf", log=lambda *_: None)
    assert not list(out.glob("*.py"))
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(hf).__name__ == "GptOssForCausalLM"
    ours = load_model(run, "cpu").model
    ids = torch.randint(0, 257, (2, T), generator=torch.Generator().manual_seed(0))
    assert max_rel_diff(ours, hf, ids) <= TOLERANCE
    assert "GptOssForCausalLM" in (out / "README.md").read_text()
