"""Encoder-decoder: cross-attention sees the whole source, the decoder is causal and the encoder is not
(gradient checks), padding is invisible, cached generation equals recomputation, the row form lines up
with the decoder-only model's targets."""

import pytest
import torch

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.evaluation.generate import greedy_cached, greedy_recompute
from posbench.model.build import build_model

SEP = 30  # the source_end token in these tests; ids 1..29 are content, 0 is padding


def model_for(decoder_pe="none", pe="sinusoidal", **extra):
    overrides = ["model.d_model=32", "model.n_heads=4", "model.n_layers=2", "model.d_ff=48", "model.vocab_size=32",
                 "model.seq_len=24", f"pe.name={pe}", "model.arch.name=encoder_decoder",
                 f"model.arch.decoder_pe.name={decoder_pe}", f"model.arch.source_end={SEP}",
                 *[f"{k}={v}" for k, v in extra.items()]]
    cfg = load_config(overrides=overrides)
    torch.manual_seed(0)
    return build_model(cfg.model, cfg.pe).eval()


def rows(src_len=5, tgt_len=6, B=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, 30, (B, src_len), generator=g)
    tgt = torch.randint(1, 30, (B, tgt_len), generator=g)
    return torch.cat([src, torch.full((B, 1), SEP), tgt], dim=1)


def grad_of_logit_wrt_embeddings(model, idx_BT, t: int):
    """d logits[0, t].sum() / d (token embedding at each row position), as an (T,) norm."""
    emb = model.tok_emb
    captured = []

    def hook(_module, _inp, out):
        out.retain_grad()
        captured.append(out)
        return out

    handle = emb.register_forward_hook(hook)
    try:
        model(idx_BT).logits[0, t].sum().backward()
    finally:
        handle.remove()
    # first call: encoder input (source), second: decoder input (<sep> target...)
    return [c.grad[0].norm(dim=-1) for c in captured]


@pytest.mark.parametrize("decoder_pe", ["none", "sinusoidal", "rope", "alibi", "pope", "fope"])
def test_decoder_is_causal_and_sees_the_whole_source(decoder_pe):
    model = model_for(decoder_pe)
    idx = rows()
    src_len = 5
    for t in (src_len, src_len + 3):  # the <sep> position and a later one
        src_grad, dec_grad = grad_of_logit_wrt_embeddings(model, idx, t)
        model.zero_grad()
        assert (src_grad > 0).all(), "the decoder's prediction must depend on every source token"
        u = t - src_len  # decoder index of row position t
        assert (dec_grad[: u + 1] > 0).all(), "it depends on the decoder tokens up to itself"
        assert (dec_grad[u + 1:] == 0).all(), "and on no later decoder token (causal)"


def test_encoder_is_bidirectional():
    model = model_for()
    idx = rows()
    src_len = 5
    pos_S = model.pe.positions(src_len, "cpu")
    keep = torch.ones(2, src_len, dtype=torch.bool)
    x = model.pe.embed(model.tok_emb(idx[:, :src_len]), pos_S).detach().requires_grad_(True)
    block = model.encoder[0]
    out = block(x, pos_S, model.pe, keep)
    out[0, 0].sum().backward()  # the first source position depends on the last one too
    assert (x.grad[0].norm(dim=-1) > 0).all()


def test_source_padding_is_invisible():
    """A shorter source in a batch with a longer one gives the same logits as on its own."""
    model = model_for("sininit", pe="learned")
    short, long = rows(src_len=3, B=1, seed=2), rows(src_len=7, B=1, seed=3)
    pad = torch.zeros(1, long.shape[1] - short.shape[1], dtype=torch.long)
    batch = torch.cat([torch.cat([short, pad], 1), long], 0)
    alone = model(short).logits[0]
    together = model(batch).logits[0, : short.shape[1]]
    torch.testing.assert_close(together[3:], alone[3:], atol=1e-5, rtol=1e-5)
    assert (together[:3] == 0).all(), "source positions predict nothing"


def test_logits_line_up_with_row_targets():
    """The decoder's logit at row position t predicts the row's token t + 1: training on the row targets
    equals a seq2seq loss written out by hand."""
    model = model_for("sinusoidal")
    idx = rows()
    targets = torch.full_like(idx, -100)
    targets[:, 5:-1] = idx[:, 6:]
    loss = model(idx, targets).loss
    src, keep = idx[:, :5], torch.ones(2, 5, dtype=torch.bool)
    dec_in, dec_out = idx[:, 5:-1], idx[:, 6:]
    logits = model.decode(dec_in, model.memory(src, keep), keep)
    manual = torch.nn.functional.cross_entropy(logits.flatten(0, 1), dec_out.flatten())
    torch.testing.assert_close(loss, manual)


@pytest.mark.parametrize("decoder_pe", ["none", "sinusoidal", "rope", "alibi", "sininit"])
def test_cached_generation_equals_uncached(decoder_pe):
    model = model_for(decoder_pe)
    prompt = rows(tgt_len=0, B=3)  # source <sep>: generation starts at the decoder's first token
    cached = greedy_cached(model, prompt, 8)
    assert torch.equal(cached, greedy_recompute(model, prompt, 8))
    cache = model.new_cache()  # and the cached logits themselves, step by step
    full = model(torch.cat([prompt, cached[:, :-1]], 1)).logits
    step = [model(prompt, cache=cache).logits[:, -1]] + [model(cached[:, i: i + 1], cache=cache).logits[:, -1]
                                                         for i in range(7)]
    torch.testing.assert_close(torch.stack(step, 1), full[:, prompt.shape[1] - 1:], atol=1e-5, rtol=1e-5)


def test_rows_without_a_source_end_are_refused():
    model = model_for()
    with pytest.raises(ValueError, match="no source_end token"):
        model(torch.randint(1, 30, (2, 8)))


def test_config_is_strict_and_decoder_pe_validated():
    with pytest.raises(ConfigError, match="decoder_pe"):
        load_config(overrides=["model.arch.name=mamba", "pe.name=none", "model.arch.decoder_pe.name=rope"])
    with pytest.raises(ConfigError, match="rope"):  # RoPE needs an even head dim, checked for the decoder's PE too
        load_config(overrides=["model.d_model=24", "model.n_heads=8", "pe.name=none",
                               "model.arch.name=encoder_decoder", "model.arch.decoder_pe.name=rope"])
    with pytest.raises(ConfigError, match="model architecture"):
        load_config(overrides=["model.arch.name=encdec"])
