"""The fused chunked head + loss (model/loss.py) against F.cross_entropy on full logits."""

import pytest
import torch
import torch.nn.functional as F

from posbench.config import load_config
from posbench.model.loss import auto_chunk_tokens, head_loss
from posbench.model.output import ModelOutput
from posbench.model.transformer import Transformer
from posbench.training.metrics import logit_stats, output_entropy


def _case(seed=0, N=37, D=16, V=101):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, D, generator=g, dtype=torch.float32)
    w = torch.randn(V, D, generator=g, dtype=torch.float32) * 0.5
    y = torch.randint(0, V, (N,), generator=g)
    y[::5] = -100  # ignored targets inside chunks
    return h, w, y


@pytest.mark.parametrize("chunk", [1, 8, 37, 64])
def test_value_and_gradients_match_cross_entropy(chunk):
    h, w, y = _case()
    h1, w1 = h.clone().requires_grad_(), w.clone().requires_grad_()
    ref = F.cross_entropy(h1 @ w1.t(), y, ignore_index=-100)
    ref.backward()
    h2, w2 = h.clone().requires_grad_(), w.clone().requires_grad_()
    out = head_loss(h2[None], w2, y[None], chunk, stats=True)
    loss = out.loss
    assert out.logits is None and out.logit_moments.shape == (6,)
    (loss * 3.0).backward()  # the incoming gradient scales both (gradient accumulation divides the loss)
    assert torch.allclose(loss, ref, atol=1e-6, rtol=0)
    assert torch.allclose(h2.grad, 3.0 * h1.grad, atol=1e-6, rtol=0)
    assert torch.allclose(w2.grad, 3.0 * w1.grad, atol=1e-6, rtol=0)
    with torch.no_grad():
        loss_eval = head_loss(h[None], w, y[None], chunk).loss
    assert torch.allclose(loss_eval, ref, atol=1e-6, rtol=0)
    full = logit_stats(ModelOutput(logits=(h @ w.t())[None]))
    assert logit_stats(out) == pytest.approx(full, rel=1e-5)
    # the output entropy from the moments: the mean over every position of -sum p log p, written out here
    p = torch.softmax((h @ w.t()).double(), dim=-1)
    want = float(-(p * p.log()).sum(-1).mean())
    assert output_entropy(out) == pytest.approx(want, rel=1e-5)
    with torch.no_grad():
        out_eval = head_loss(h[None], w, y[None], chunk, stats=True)
    assert output_entropy(out_eval) == pytest.approx(want, rel=1e-5)
    # stats off (the loop's non-log steps): the same loss, no moments
    assert head_loss(h[None], w, y[None], chunk).logit_moments is None


def test_model_tied_embedding_gradient_matches_full_loss():
    cfg = load_config(model_size="nano", overrides=["model.seq_len=32"])
    torch.manual_seed(1)
    x = torch.randint(0, cfg.model.vocab_size, (2, 32))
    y = torch.randint(0, cfg.model.vocab_size, (2, 32))
    y[0, :5] = -100
    grads, values = [], []
    for chunk in (0, 24):
        torch.manual_seed(0)
        model = Transformer(cfg.model, cfg.pe, loss_chunk_tokens=chunk)
        loss = model(x, y).loss
        loss.backward()
        values.append(loss.detach())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    assert torch.allclose(values[0], values[1], atol=1e-6, rtol=0)
    assert model.lm_head.weight is model.tok_emb.weight
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6, rtol=0), name


def test_auto_is_chunked_from_vocab_32768():
    assert auto_chunk_tokens(32767) == 0 and auto_chunk_tokens(32768) > 0
    assert auto_chunk_tokens(65536, "full") == 0 and auto_chunk_tokens(512, "chunked", 64) == 64


def test_loop_with_chunked_loss_logs_logit_stats(tmp_path):
    import json
    from pathlib import Path

    from posbench.training.batch_sources import RandomTokens
    from posbench.training.loop import train
    from tests.training.helpers import nano_config

    cfg = nano_config(tmp_path, "train.loss=chunked", "train.loss_chunk_tokens=48", "train.max_steps=2")
    out = train(cfg, RandomTokens(512, 64))
    rows = [json.loads(x) for x in (Path(out["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if "loss" in r]
    assert len(logged) == 2 and all(r["logits/std"] > 0 and r["logits/max_abs"] > 0 for r in logged)
