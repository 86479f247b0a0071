"""Adding a PE is one file (docs/architecture.md, Adding a PE): tests/pe/toy_pe.py registers a toy log-distance bias
with `@PES.register` and nothing else is edited. It reaches attention as written, trains, decodes with the KV cache
as without it, and exports to transformers with no file of its own beyond it: the export ships its module (flat,
as module `tests_pe_toy_pe`, its posbench imports made relative) beside posbench's, and the exported model computes what
posbench does. The registration lives for this module only: the fixture removes it, so no other test sees the name."""

import importlib
import sys

import pytest
import torch

from posbench.config import load_config
from posbench.evaluation.generate import greedy_cached, greedy_recompute
from posbench.evaluation.loading import load_model
from posbench.model.transformer import Transformer
from posbench.pe import PES

TOY = "toy_log_bias"


@pytest.fixture(scope="module")
def toy():
    assert TOY not in PES
    module = importlib.import_module("tests.pe.toy_pe")
    yield module.ToyLogBias
    PES.unregister(TOY)
    sys.modules.pop("tests.pe.toy_pe")


def small(pe: str) -> Transformer:
    torch.manual_seed(0)
    cfg = load_config(model_size="nano", pe_type=pe, overrides=["model.seq_len=32", "model.vocab_size=61"])
    return Transformer(cfg.model, cfg.pe)


def test_the_toy_is_registered_from_its_own_file(toy):
    assert PES.get(TOY) is toy and TOY in PES.names() and toy.name == TOY
    assert toy.Config().name == TOY and load_config(model_size="nano", pe_type=TOY).pe.name == TOY


def test_the_toy_bias_reaches_attention_as_written(toy):
    """Layer 0's logits with the toy PE minus those of NoPE on the same weights: -log(1 + i - j) (h + 1) / H."""
    ours, nope = small(TOY), small("none")
    nope.load_state_dict(ours.state_dict())
    ids = torch.randint(0, 61, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff_BHTT = ours.attention_scores(ids)[0] - nope.attention_scores(ids)[0]
    H = ours.cfg.n_heads
    i, j = torch.arange(20)[:, None], torch.arange(20)[None, :]
    want_HTT = -torch.log1p((i - j).float()) * (torch.arange(H)[:, None, None] + 1) / H
    causal = j <= i
    assert torch.allclose(diff_BHTT[:, :, causal], want_HTT[:, causal].expand(2, -1, -1), atol=1e-5)


def test_the_toy_trains_decodes_with_its_cache_and_exports_with_no_file_of_its_own(toy, tmp_path):
    from tests.interop.test_hf_export import checkpoint

    run = checkpoint(tmp_path, TOY)  # a short training run on random tokens, then every weight perturbed
    loaded = load_model(run, "cpu")
    assert loaded.cfg.pe.name == TOY and type(loaded.model.pe) is toy
    prompt = torch.randint(0, 257, (2, 12), generator=torch.Generator().manual_seed(0))
    cached_scores, recomputed_scores = [], []
    cached = greedy_cached(loaded.model, prompt, 16, scores=cached_scores)
    recomputed = greedy_recompute(loaded.model, prompt, 16, scores=recomputed_scores)
    assert torch.equal(cached, recomputed)
    assert (torch.stack(cached_scores) - torch.stack(recomputed_scores)).abs().max().item() <= 1e-4

    transformers = pytest.importorskip("transformers")
    from posbench.interop.hf_export import export
    from posbench.interop.hf_posbench import REMOTE

    out = export(run, tmp_path / "toy_hf", log=lambda *_: None)  # its own module namespace in transformers' cache
    assert (out / "tests_pe_toy_pe.py").is_file() and "from .pe_bias import BiasPE" in \
        (out / "tests_pe_toy_pe.py").read_text()
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, trust_remote_code=True).eval()
    assert type(hf).__name__ == REMOTE
    assert type(hf.pe).__name__ == "ToyLogBias" and type(hf.pe) is not toy
    assert type(hf.pe).__module__.startswith("transformers_modules.") and \
        type(hf.pe).__module__.endswith(".tests_pe_toy_pe")
    with torch.no_grad():
        want, got = loaded.model(prompt).logits, hf(prompt).logits
    assert (got - want).abs().max().item() <= 1e-5 * want.abs().max().item()  # greedy decoding: the export's check
