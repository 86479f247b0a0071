"""Sliding-window attention (model.attention_window): the masks against hand-built loops, every kernel against the
eager reference, cached decoding against the full forward, the window together with document masking, and the
receptive field a stack of windowed layers has (an independent, behavioural check of the rule)."""

import pytest
import torch

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.identity_fields import name_suffix
from posbench.model.flops import stats_of
from posbench.model.masks import causal_mask, window_mask_mod
from posbench.model.packing import Documents
from posbench.training.rundir import identity
from tests.conftest import build_test_model
from tests.model.test_packing import alone_run, documents, packed_run, packing


def hand_mask(T, S, W, doc_q=None, doc_k=None):
    """The rule written out: query t sits at key index S - T + t, sees keys j <= it, the last W of them, and (with
    documents) only keys of its own document."""
    out = torch.zeros(T, S, dtype=torch.bool)
    for t in range(T):
        i = S - T + t
        for j in range(S):
            ok = j <= i and (W is None or i - j < W)
            if doc_q is not None:
                ok = ok and doc_q[t] == doc_k[j]
            out[t, j] = ok
    return out


@pytest.mark.parametrize("T,S,W", [(6, 6, None), (6, 6, 1), (6, 6, 3), (3, 8, 2), (1, 9, 4), (5, 5, 10), (4, 7, 7)])
def test_the_window_mask_is_the_hand_built_rule(T, S, W):
    assert torch.equal(causal_mask(T, S, "cpu", W), hand_mask(T, S, W))
    q = torch.arange(T)[:, None]
    kv = torch.arange(S)[None, :]
    assert torch.equal(window_mask_mod(S - T, W)(0, 0, q, kv), hand_mask(T, S, W))


@pytest.mark.parametrize("W", [None, 1, 2, 4])
def test_the_document_mask_with_a_window_is_the_hand_built_rule(W):
    doc_k = torch.tensor([[0, 0, 1, 1, 1, 1, 2, 2, 2], [3, 4, 4, 4, 4, 4, 4, 5, 5]])
    doc_q = doc_k[:, 4:]  # a cache of 4 keys, 5 new queries
    docs = Documents(doc_q, doc_k, masked=True)
    for b in range(2):
        want = hand_mask(5, 9, W, doc_q[b].tolist(), doc_k[b].tolist())
        assert torch.equal(docs.allowed(W)[b, 0], want)
    # causal-only documents (positions restart, the mask does not) still get the window
    unmasked = Documents(doc_q, doc_k, masked=False)
    assert torch.equal(unmasked.allowed(W)[0, 0], hand_mask(5, 9, W))
    assert docs.allowed(W) is docs.allowed(W)  # built once per window, shared by the layers


def windowed(name, kernel, window="[3,null,5,1]", overrides=()):
    return build_test_model(name, overrides=[f"model.attention={kernel}", f"model.attention_window={window}",
                                             *overrides]).eval()


@pytest.mark.parametrize("name,kernel", [("rope", "sdpa"), ("rope", "flex"), ("none", "sdpa"), ("none", "flex"),
                                         ("alibi", "flex"), ("t5", "flex"), ("hybrid", "sdpa")])
def test_each_kernel_computes_what_the_eager_kernel_does_with_windows(name, kernel):
    """Per-layer windows [3, full, 5, 1]: a rotary, a bias and a none PE, flex's unfused CPU forward."""
    idx = torch.randint(0, 61, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        eager = windowed(name, "eager")(idx).logits
        other = windowed(name, kernel)(idx).logits
        full = build_test_model(name, overrides=["model.attention=eager"]).eval()(idx).logits
    torch.testing.assert_close(other, eager, rtol=1e-4, atol=1e-4)
    assert (eager - full).abs().max() > 1e-3, "the window changed nothing: the test would pass without it"


def test_no_window_keeps_the_plain_causal_sdpa_call(monkeypatch):
    import torch.nn.functional as F

    calls, real = [], F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(k) or real(*a, **k))
    idx = torch.randint(0, 61, (2, 12))
    build_test_model("rope", overrides=["model.attention_window=[4,null]"])(idx)
    windows = [c.get("attn_mask") for c in calls]
    assert windows[1] is None and calls[1]["is_causal"] is True  # the full layer
    assert windows[0].dtype == torch.bool and torch.equal(windows[0], hand_mask(12, 12, 4))


def test_a_token_outside_the_receptive_field_changes_nothing():
    """Four layers of window 3: position i reads tokens i-8 .. i (each layer reaches 2 further back), so changing
    token 0 moves the logits at position 8 and leaves those from 9 on untouched."""
    model = windowed("rope", "eager", window=3)
    idx = torch.randint(0, 61, (1, 16), generator=torch.Generator().manual_seed(2))
    other = idx.clone()
    other[0, 0] = (idx[0, 0] + 1) % 61
    with torch.no_grad():
        diff = (model(idx).logits - model(other).logits).abs().amax(-1)[0]
    assert diff[8] > 1e-5
    assert diff[9:].max() <= 1e-6


@pytest.mark.parametrize("name,kernel", [("rope", "sdpa"), ("rope", "eager"), ("none", "sdpa"), ("alibi", "eager"),
                                         ("t5", "flex"), ("hybrid", "sdpa")])
def test_cached_decoding_equals_the_full_forward_with_a_window_shorter_than_the_prompt(name, kernel):
    """Window 4 on every other layer, a 10-token prompt, a 3-token chunk, then one token at a time: the cache keeps
    every key and the mask hides those outside the window."""
    model = windowed(name, kernel, window="[4,null]")
    idx = torch.randint(0, 61, (2, 22), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(idx).logits
        cache = model.new_cache()
        parts = [model(idx[:, :10], cache=cache).logits, model(idx[:, 10:13], cache=cache).logits]
        parts += [model(idx[:, t:t + 1], cache=cache).logits for t in range(13, 22)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["rope", "alibi", "none", "t5"])
def test_window_and_document_mask_restrict_together(name):
    """With mask=document, positions=document and a window, a packed window computes what each document computes
    alone with the same window (documents of 5..12 tokens, window 3: both restrictions bind)."""
    ov = ["model.attention_window=3", *packing("document", "document")]
    packed_model = build_test_model(name, overrides=ov).eval()
    alone_model = build_test_model(name, overrides=ov).eval()
    rows = documents()
    with torch.no_grad():
        packed, _ = packed_run(packed_model, rows)
        alone, _ = alone_run(alone_model, rows)
    for (p_logits, _), (a_logits, _) in zip(packed, alone):
        torch.testing.assert_close(p_logits, a_logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name,kernel", [("rope", "sdpa"), ("rope", "flex"), ("alibi", "flex")])
def test_kernels_agree_on_window_plus_document_mask_and_cached_decoding(name, kernel):
    ov = ["model.attention_window=[3,null]", *packing("document", "document")]
    idx = torch.stack([torch.cat(docs) for docs in documents()])
    with torch.no_grad():
        eager = build_test_model(name, overrides=["model.attention=eager", *ov]).eval()(idx).logits
        model = build_test_model(name, overrides=[f"model.attention={kernel}", *ov]).eval()
        other = model(idx).logits
        cache = model.new_cache()
        steps = [model(idx[:, :9], cache=cache).logits] + [model(idx[:, t:t + 1], cache=cache).logits
                                                             for t in range(9, idx.shape[1])]
    torch.testing.assert_close(other, eager, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.cat(steps, dim=1), eager, rtol=1e-4, atol=1e-4)


def test_windows_cycle_over_layers_and_the_pe_window_merges_with_the_model_window():
    model = build_test_model("rope", overrides=["model.attention_window=[4,null]"])
    assert [b.attn.kernel.window for b in model.blocks] == [4, None, 4, None]
    assert [b.attn.kernel.window for b in build_test_model("rope", overrides=["model.attention_window=6"]).blocks] \
        == [6] * 4
    merged = build_test_model("rnope_swa", overrides=["pe.window=6", "model.attention_window=[4,null,8,8]"])
    assert [b.attn.kernel.window for b in merged.blocks] == [4, 6, 6, 8]  # the smaller of the two, per layer


@pytest.mark.parametrize("value,message", [("0", ">= 1"), ("[]", "lists no layer"), ("[1,2,3,4,5]", "at most one"),
                                           ("[4,-1]", ">= 1")])
def test_bad_windows_are_refused_with_what_to_change(value, message):
    with pytest.raises(ConfigError, match=message):
        load_config(model_size="nano", overrides=[f"model.attention_window={value}"])


def test_the_window_is_refused_for_the_encoder_decoder():
    with pytest.raises(ConfigError, match="decoder only"):
        load_config(model_size="nano", overrides=["model.attention_window=8", "model.arch.name=encoder_decoder"])


def test_the_run_identity_records_the_window_only_when_set():
    plain = load_config(model_size="nano")
    ident = identity(plain, "fp")
    assert "attention_window" not in ident and "attention_window" not in ident["model"]
    windowed_cfg = load_config(model_size="nano", overrides=["model.attention_window=[8,null]"])
    assert identity(windowed_cfg, "fp")["attention_window"] == [8, None]
    assert identity(windowed_cfg, "fp")["model"] == ident["model"]
    assert name_suffix(plain.model) == "" and name_suffix(windowed_cfg.model) == "_win8-full"


def test_flops_count_the_keys_a_window_lets_a_query_see():
    """PaLM's full-row convention: 12 * d_model * T per layer; a windowed layer scores W keys per query."""
    full = build_test_model("rope")
    win = build_test_model("rope", overrides=["model.attention_window=[8,null]"])
    d, T = 32, 64
    drop = stats_of(full, full.cfg).flops_per_token_train - stats_of(win, win.cfg).flops_per_token_train
    assert drop == 2 * 12 * d * (T - 8)  # two of the four layers have window 8
    big = build_test_model("rope", overrides=["model.attention_window=1000"])
    assert stats_of(big, big.cfg).flops_per_token_train == stats_of(full, full.cfg).flops_per_token_train



def test_flash_alibi_passes_the_window_as_flash_attn_defines_it(monkeypatch):
    """flash-attn is not installed here (nor a GPU): a stand-in with flash-attn's documented semantics (query i of
    T sees keys i + S - T - window_size[0] .. i + S - T + window_size[1]; ALiBi -slope * |i - j|) checks the window
    the kernel hands over against the eager kernel, with a KV cache (T < S)."""
    import math
    import sys
    import types

    from posbench.model.kernels import EagerKernel, FlashAlibiKernel

    def flash(q, k, v, dropout_p=0.0, causal=False, alibi_slopes=None, window_size=(-1, -1)):
        T, S = q.shape[1], k.shape[1]
        s = torch.einsum("bthk,bshk->bhts", q, k) / math.sqrt(q.shape[-1])
        i = torch.arange(T)[:, None] + S - T
        j = torch.arange(S)[None, :]
        s = s - alibi_slopes[:, None, None] * (i - j).abs()
        left, right = window_size
        ok = (j <= i) if causal else torch.ones(T, S, dtype=torch.bool)
        if left >= 0:
            ok = ok & (j >= i - left)
        if right >= 0:
            ok = ok & (j <= i + right)
        return torch.einsum("bhts,bshk->bthk", s.masked_fill(~ok, float("-inf")).softmax(-1), v)

    monkeypatch.setitem(sys.modules, "flash_attn", types.SimpleNamespace(flash_attn_func=flash))
    pe = build_test_model("alibi").pe
    q = torch.randn(2, 4, 5, 8)
    k, v = torch.randn(2, 4, 12, 8), torch.randn(2, 4, 12, 8)
    score_mod = pe.score_mod(0, torch.arange(7.0, 12.0), torch.arange(12.0))
    for window in (None, 1, 3, 20):
        fast = pe.speed.fast_bias(0, torch.arange(7.0, 12.0), torch.arange(12.0))
        got = FlashAlibiKernel(pe, "cuda", 0.0, window)(q, k, v, None, False, None, fast)
        want = EagerKernel(pe, "cpu", 0.0, window)(q, k, v, score_mod, False)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_windowed_run_records_its_window_in_name_identity_and_checkpoint(tmp_path):
    import json
    from pathlib import Path

    from posbench.evaluation.loading import load_model
    from posbench.training.batch_sources import RandomTokens
    from posbench.training.loop import train
    from tests.training.helpers import nano_config

    out = train(nano_config(tmp_path, "model.attention_window=[16,null]", "train.max_steps=2"), RandomTokens(512, 64))
    run = Path(out["run_dir"])
    assert run.name.endswith("_win16-full")
    assert json.loads((run / "identity.json").read_text())["attention_window"] == [16, None]
    model = load_model(run / "latest").model  # eval.py's loader builds the windowed model from config.yaml
    assert [b.attn.kernel.window for b in model.blocks] == [16, None]
