"""model.packing, held to its definition for every registered PE: a packed window read with mask=document and
positions=document computes, token for token, what each of its documents computes alone (losses and gradients),
and with either switch off it does not (where the PE can tell: a shift-invariant PE cannot see window positions
once the mask isolates documents, so for those the positions switch alone must change nothing)."""

import pytest
import torch
import torch.nn.functional as F

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.model.kernels import EagerKernel, FlexKernel
from posbench.model.packing import Documents, split_documents
from posbench.pe import PES
from tests.conftest import build_test_model

ALL_PES = PES.names()
BOS = 60  # the test model's vocabulary is 61
ROWS = [(7, 11, 9), (12, 5, 10)]  # document lengths per row, <|bos|> included


def packing(mask, positions):
    return [f"model.packing.mask={mask}", f"model.packing.positions={positions}", f"model.packing.bos_id={BOS}"]


def documents(seed=0):
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for lengths in ROWS:
        rows.append([torch.cat((torch.tensor([BOS]), torch.randint(0, BOS, (n - 1,), generator=gen)))
                     for n in lengths])
    return rows


def models(name, *modes):
    """One model per (mask, positions) mode, all with the weights of the first."""
    built = [build_test_model(name, overrides=packing(*mode)).eval() for mode in modes]
    for m in built[1:]:
        m.load_state_dict(built[0].state_dict())
    return built


def token_losses(logits_TV, doc_T):
    """Cross-entropy of predicting each document's next token (its last token has none in the document)."""
    return F.cross_entropy(logits_TV[:-1].float(), doc_T[1:], reduction="none")


def packed_run(model, rows):
    """Per row and document: (logits, per-token losses) of the packed window, and the sum of the losses."""
    idx = torch.stack([torch.cat(docs) for docs in rows])
    logits = model(idx).logits
    out, total = [], 0.0
    for b, docs in enumerate(rows):
        start = 0
        for doc in docs:
            seg = logits[b, start:start + len(doc)]
            losses = token_losses(seg, doc)
            out.append((seg, losses))
            total = total + losses.sum()
            start += len(doc)
    return out, total


def alone_run(model, rows):
    out, total = [], 0.0
    for docs in rows:
        for doc in docs:
            logits = model(doc[None]).logits[0]
            losses = token_losses(logits, doc)
            out.append((logits, losses))
            total = total + losses.sum()
    return out, total


def max_diff(a, b):
    return max((x[0] - y[0]).abs().max().item() for x, y in zip(a, b))


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ALL_PES)
def test_a_packed_window_computes_what_each_document_computes_alone(name):
    """The definition, losses and gradients, <= 1e-5 in float32. Models run in eval mode: randomized positions
    are then the fixed-seed draw for each document's length (pe.sample_at_eval), which a document alone gets
    too; in training mode every document draws afresh, so no two runs are equal, packed or not."""
    packed_model, alone_model = models(name, ("document", "document"), ("document", "document"))
    rows = documents()
    packed, packed_total = packed_run(packed_model, rows)
    alone, alone_total = alone_run(alone_model, rows)
    for (p_logits, p_losses), (a_logits, a_losses) in zip(packed, alone):
        torch.testing.assert_close(p_logits, a_logits, rtol=0, atol=1e-5)
        torch.testing.assert_close(p_losses, a_losses, rtol=0, atol=1e-5)
    packed_total.backward()
    alone_total.backward()
    g_packed, g_alone = grads(packed_model), grads(alone_model)
    assert g_packed.keys() == g_alone.keys() and g_packed
    for n in g_packed:
        torch.testing.assert_close(g_packed[n], g_alone[n], rtol=0, atol=1e-5, msg=lambda m: f"{n}: {m}")


def shift_invariant(model) -> bool:
    """Whether window positions are invisible once documents are isolated: relative PEs, except randomized
    positions (a window draws other positions than its documents do alone)."""
    return model.pe.is_relative and model.pe.name != "randomized"


@pytest.mark.parametrize("name", ALL_PES)
def test_either_switch_off_changes_what_a_packed_window_computes(name):
    no_mask, window_pos, reference = models(name, ("causal", "document"), ("document", "window"),
                                            ("document", "document"))
    rows = documents()
    with torch.no_grad():
        alone, _ = alone_run(reference, rows)
        # mask off: later documents attend to earlier ones, whatever the PE (NoPE included)
        assert max_diff(packed_run(no_mask, rows)[0], alone) > 1e-3
        # positions off: documents after the first start at their window offset
        diff = max_diff(packed_run(window_pos, rows)[0], alone)
    if shift_invariant(window_pos):
        assert diff <= 1e-4, f"{name} is relative, yet window positions changed its outputs by {diff}"
    else:
        assert diff > 1e-3


def test_the_default_runs_the_plain_causal_kernel_with_no_mask_tensor(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    idx = torch.stack([torch.cat(docs) for docs in documents()])
    build_test_model("rope")(idx)
    assert calls and all(c.get("is_causal") is True and c.get("attn_mask") is None for c in calls)
    # and the document mask is a (B, 1, T, S) bool tensor, no float bias
    calls.clear()
    build_test_model("rope", overrides=packing("document", "window"))(idx)
    masks = [c["attn_mask"] for c in calls]
    assert masks and all(m.dtype == torch.bool and m.shape == (2, 1, 27, 27) for m in masks)


def test_the_default_path_is_untouched_by_an_inactive_packing():
    """A switch on but no boundary token (task rows, random tokens: bos_id None) is the default, bit for bit."""
    torch.manual_seed(0)
    idx = torch.randint(0, 61, (2, 20))
    a = build_test_model("alibi")
    b = build_test_model("alibi", overrides=["model.packing.mask=document", "model.packing.positions=document"])
    assert not b.cfg.packing.active
    assert torch.equal(a(idx[:, :-1], idx[:, 1:]).loss, b(idx[:, :-1], idx[:, 1:]).loss)


@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "learned", "sinusoidal", "fire", "xpos", "hybrid"])
def test_cached_decoding_equals_the_full_forward_across_a_document_start(name):
    model = build_test_model(name, overrides=packing("document", "document")).eval()
    idx = torch.stack([torch.cat(docs) for docs in documents()])[:, :20]  # row 0 starts documents at 0 and 7
    with torch.no_grad():
        full = model(idx).logits
        cache = model.new_cache()
        first = model(idx[:, :5], cache=cache).logits
        steps = [model(idx[:, t:t + 1], cache=cache).logits for t in range(5, 20)]
    torch.testing.assert_close(torch.cat([first, *steps], dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "kerple_log", "hybrid"])
def test_flex_with_the_batch_block_mask_computes_what_the_eager_kernel_does(name):
    """FlexAttention (its unfused CPU forward) with a BlockMask over document ids against the eager reference."""
    model = build_test_model(name, overrides=packing("document", "document")).eval()
    idx = torch.stack([torch.cat(docs) for docs in documents()])
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            block.attn.kernel = EagerKernel(model.pe.layer_pe(layer), "cpu", 0.0)
        eager = model(idx).logits
        for layer, block in enumerate(model.blocks):
            block.attn.kernel = FlexKernel(model.pe.layer_pe(layer), "cpu", 0.0)
        flex = model(idx).logits
    torch.testing.assert_close(flex, eager, rtol=1e-4, atol=1e-4)


def test_documents_split_at_bos_and_a_cut_document_starts_the_window():
    idx = torch.tensor([[5, 6, BOS, 1, 2, BOS, 3], [BOS, 1, 2, 3, BOS, 4, 5]])
    doc, within, _ = split_documents(idx, BOS)
    assert doc.tolist() == [[0, 0, 1, 1, 1, 2, 2], [1, 1, 1, 1, 2, 2, 2]]
    assert within.tolist() == [[0, 1, 0, 1, 2, 0, 1], [0, 1, 2, 3, 0, 1, 2]]
    allowed = Documents(doc, doc, masked=True).allowed()[0, 0]
    assert allowed[4].tolist() == [False, False, True, True, True, False, False]


def test_packing_is_refused_where_it_is_not_implemented():
    with pytest.raises(ConfigError, match="decoder only"):
        load_config(overrides=["model.arch.name=mamba", "model.packing.mask=document"])
    with pytest.raises(ConfigError, match="per-document positions"):
        build_test_model("alibi", overrides=packing("causal", "document") + ["model.attention=flash_alibi"],
                         )


class DocumentTokens:
    """Random rows with a <|bos|> every 16 tokens (from token 5 on): packed documents, the last one cut."""

    def __init__(self, vocab_size, seq_len, bos_id):
        from posbench.training.batch_sources import RandomTokens

        self.rows, self.bos_id = RandomTokens(vocab_size - 1, seq_len), bos_id
        self.fingerprint, self.tokenizer_fingerprint = "docs-" + self.rows.fingerprint, ""
        self.content = {}

    def _docs(self, xy):
        x, y = xy
        x, y = x.clone(), y.clone()
        x[:, 5::16] = self.bos_id
        y[:, 4::16] = self.bos_id
        return x, y

    def samples(self, indices):
        return self._docs(self.rows.samples(indices))

    def val_samples(self, indices):
        return self._docs(self.rows.val_samples(indices))

    def n_val(self):
        return self.rows.n_val()


def test_training_takes_the_boundary_from_the_data_and_records_both_switches(tmp_path):
    """The data's bos_id lands in the saved config; identity, meta and run name say which switches were on; eval's
    loader builds the model that reads windows as training did."""
    import json

    from posbench.evaluation.loading import load_model
    from posbench.training.loop import train
    from tests.training.helpers import nano_config

    cfg = nano_config(tmp_path, "train.stream=random", "train.max_steps=2", "model.packing.mask=document",
                      "model.packing.positions=document", "pe.name=alibi")
    assert cfg.model.packing.bos_id is None
    source = DocumentTokens(cfg.model.vocab_size, cfg.model.seq_len, cfg.model.vocab_size - 1)
    run_dir = tmp_path / train(cfg, source)["run_dir"]
    assert run_dir.name.endswith("_docmask_docpos")
    want = {"mask": "document", "positions": "document", "bos_id": cfg.model.vocab_size - 1}
    assert json.loads((run_dir / "identity.json").read_text())["packing"] == want
    meta = json.loads((run_dir / "latest" / "meta.json").read_text())
    assert meta["packing"] == want and meta["identity"]["packing"] == want
    loaded = load_model(run_dir)
    assert loaded.cfg.model.packing.active and loaded.cfg.model.packing.bos_id == want["bos_id"]
    # and a bos_id that contradicts the data is refused
    bad = nano_config(tmp_path / "bad", "train.stream=random", "model.packing.mask=document",
                      "model.packing.bos_id=3")
    with pytest.raises(ConfigError, match="leave model.packing.bos_id unset"):
        train(bad, source)


def test_the_default_identity_is_the_identity_runs_had_before_packing_existed():
    from posbench.training.rundir import identity

    ident = identity(load_config(), "data")
    assert "packing" not in ident and "packing" not in ident["model"]
    assert identity(load_config(overrides=["model.packing.mask=document"]), "data")["packing"]["mask"] == "document"


def test_a_packed_checkpoint_is_exported_with_the_remote_code_not_as_qwen3():
    """Qwen3 attends across documents and counts positions from the row's start, so a packed model must not be
    written as one (tests/interop/test_hf_export_packing.py checks the remote code's documents against posbench)."""
    from posbench.interop.hf_refusals import qwen3_reason

    assert qwen3_reason(load_config()) is None  # the default RoPE model is a Qwen3
    for mode in (["model.packing.mask=document"], ["model.packing.positions=document"]):
        cfg = load_config(overrides=mode + ["model.packing.bos_id=1"])
        assert "model.packing" in qwen3_reason(cfg)


def test_flash_alibi_varlen_cuts_rows_into_documents(monkeypatch):
    """flash-attn is not installed here (nor a GPU): a stand-in `flash_attn_varlen_func` with flash-attn's
    semantics (causal within each cu_seqlens sequence, ALiBi -slope * (i - j)) checks the kernel's own part, the
    sequences it cuts and the layout it hands over, against the eager kernel with the document mask."""
    import math
    import sys
    import types

    from posbench.model.kernels import FlashAlibiKernel

    def varlen(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p=0.0, causal=False, alibi_slopes=None):
        assert causal and torch.equal(cu_q, cu_k) and cu_q.dtype == torch.int32
        out = torch.empty_like(q)
        for a, b in zip(cu_q[:-1].tolist(), cu_q[1:].tolist()):
            s = torch.einsum("thk,shk->hts", q[a:b], k[a:b]) / math.sqrt(q.shape[-1])
            i = torch.arange(b - a)
            s = s - alibi_slopes[:, None, None] * (i[:, None] - i[None, :]).clamp_min(0)
            s = s.masked_fill(i[None, :] > i[:, None], float("-inf"))
            out[a:b] = torch.einsum("hts,shk->thk", s.softmax(-1), v[a:b])
        return out

    monkeypatch.setitem(sys.modules, "flash_attn", types.SimpleNamespace(flash_attn_varlen_func=varlen))
    pe = build_test_model("alibi").pe
    idx = torch.stack([torch.cat(docs) for docs in documents()])
    doc, _, _ = split_documents(idx, BOS)
    docs = Documents(doc, doc, masked=True)
    q, k, v = (torch.randn(2, 4, 27, 8) for _ in range(3))
    fast = pe.speed.fast_bias(0, torch.arange(27.0), torch.arange(27.0))
    got = FlashAlibiKernel(pe, "cuda", 0.0)(q, k, v, None, False, docs, fast)
    want = EagerKernel(pe, "cpu", 0.0)(q, k, v, pe.score_mod(0, torch.arange(27.0), torch.arange(27.0)), False, docs)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
