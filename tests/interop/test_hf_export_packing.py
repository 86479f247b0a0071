"""Export of a checkpoint whose rows are split into documents (model.packing: mask=document and/or
positions=document at bos_id): the remote code splits rows at the same token as posbench, in a full forward and
in cached generation (the cache carries the current document's start). Held to posbench (logits within 1e-4 on
rows holding several documents; the same greedy tokens with and without the KV cache from a prompt that crosses
a document boundary) and to the definition itself: with both switches on, a document inside a packed row computes
what it computes alone. position_ids: generate's token indices and the per-document positions are accepted, others
refused. Randomized positions are drawn per document, as posbench draws them."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posbench.evaluation.loading import load_model  # noqa: E402
from posbench.interop.hf_export import export  # noqa: E402
from tests.interop.test_hf_export import assert_generation_parity, hf_greedy, max_diff, ours_greedy  # noqa: E402
from tests.interop.test_hf_export_remote import SCORE_TOLERANCE, random_checkpoint  # noqa: E402

BOS = 256  # the bytes tokenizer's <|bos|>
BOTH = ["model.packing.mask=document", "model.packing.positions=document", f"model.packing.bos_id={BOS}"]
PES = {"rope": ["pe.name=rope"], "alibi": ["pe.name=alibi"], "learned": ["pe.name=learned"]}


def exported(tmp_path, *overrides):
    run = random_checkpoint(tmp_path, *overrides)
    logs = []
    out = export(run, tmp_path / "hf", log=logs.append)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, trust_remote_code=True).eval()
    return hf, load_model(run, "cpu").model, logs


def packed_ids():
    """Two rows of 40 tokens: row 0 holds a cut document, then documents at 12 and 27; row 1 one at 20."""
    ids = torch.randint(0, BOS, (2, 40), generator=torch.Generator().manual_seed(0))
    ids[0, 12] = ids[0, 27] = ids[1, 20] = BOS
    return ids


@pytest.mark.parametrize("pe", sorted(PES))
def test_document_packing_exports_and_generates_as_posbench(tmp_path, pe):
    hf, ours, logs = exported(tmp_path, *PES[pe], *BOTH)
    assert type(hf).__name__ == "PosbenchForCausalLM"  # rope too: Qwen3 cannot split rows
    assert hf.config.packing == {"mask": "document", "positions": "document", "bos_id": BOS}
    assert "model.packing (mask=document, positions=document)" in logs[0]
    ids = packed_ids()
    with torch.no_grad():
        want, got = ours(ids).logits, hf(ids).logits
        # the definition, independent of posbench: the document at 27 computes in the row what it computes alone
        alone = hf(ids[:1, 27:]).logits
    assert max_diff(got, want) <= SCORE_TOLERANCE
    assert max_diff(got[:1, 27:], alone) <= SCORE_TOLERANCE
    # a prompt whose second document starts at 6: cached decoding continues it, as posbench's cache does
    prompt = ids[1, 14:30].tolist()
    assert prompt[6] == BOS
    assert_generation_parity(hf, ours, prompt, 24)
    # the same continuation as that document's tokens alone (it started at the boundary)
    alone_new, _ = hf_greedy(hf, torch.tensor([prompt[6:]]), 24, use_cache=True)
    assert alone_new == hf_greedy(hf, torch.tensor([prompt]), 24, use_cache=True)[0]


@pytest.mark.parametrize("switches", [["model.packing.mask=document"], ["model.packing.positions=document"]])
def test_either_switch_alone_exports_as_posbench(tmp_path, switches):
    hf, ours, _ = exported(tmp_path, "pe.name=alibi", *switches, f"model.packing.bos_id={BOS}")
    ids = packed_ids()
    with torch.no_grad():
        assert max_diff(hf(ids).logits, ours(ids).logits) <= SCORE_TOLERANCE
    assert_generation_parity(hf, ours, ids[1, 14:30].tolist(), 16)


def test_left_padded_rows_split_their_documents_alone(tmp_path):
    """A left-padded batch: each row's documents are found among its real tokens (a pad is never a boundary,
    even with the pad id equal to bos_id), and each row generates as its prompt alone in posbench."""
    hf, ours, _ = exported(tmp_path, "pe.name=rope", *BOTH)
    ids = packed_ids()
    prompts = [ids[1, 14:30].tolist(), ids[0, 8:17].tolist()]
    width = max(map(len, prompts))
    batch = torch.tensor([[BOS] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    new, scores_BNV = hf_greedy(hf, batch, 12, use_cache=True, attention_mask=mask)
    for row, prompt in enumerate(prompts):
        want, want_scores = ours_greedy(ours, torch.tensor([prompt]), 12, cached=True)
        assert new[row] == want[0], f"row {row}"
        assert max_diff(scores_BNV[row:row + 1], want_scores) <= SCORE_TOLERANCE, f"row {row}"


def test_position_ids_are_token_indices_or_document_positions(tmp_path):
    hf, _, _ = exported(tmp_path, "pe.name=rope", *BOTH)
    ids = packed_ids()[:1, :20]  # a document starts at 12
    index = torch.arange(20)[None]
    within = torch.cat((torch.arange(12), torch.arange(8)))[None]
    with torch.no_grad():
        plain = hf(ids).logits
        assert max_diff(hf(ids, position_ids=index).logits, plain) == 0.0  # what generate passes
        assert max_diff(hf(ids, position_ids=within).logits, plain) == 0.0  # the model's own, given back
        with pytest.raises(ValueError, match="or each token's index within its document"):
            hf(ids, position_ids=torch.arange(5, 25)[None])
        # a cache whose document state was lost (filled elsewhere) is refused, not decoded at wrong positions
        first = hf(ids[:, :15], use_cache=True)
        cache = first["cache"] if "cache" in first else first["past_key_values"]
        del cache.posbench_documents
        with pytest.raises(ValueError, match="carry no document boundaries"):
            hf(ids[:, 15:16], cache=cache)


def test_randomized_positions_per_document_export_as_posbench(tmp_path):
    """posbench draws one set of randomized positions per document (pe/randomized.py `document_positions`); the
    exported model runs that very code, so a packed row computes as posbench's does (no cache: drawn per sequence)."""
    hf, ours, _ = exported(tmp_path, "pe.name=randomized", *BOTH)
    assert hf.whole_sequence
    ids = packed_ids()
    with torch.no_grad():
        assert max_diff(hf(ids, use_cache=False).logits, ours(ids).logits) <= SCORE_TOLERANCE
