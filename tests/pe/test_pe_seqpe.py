"""SeqPE against the authors' computation (ghrua/seqpe text_seqpe: custom_modules/sequential_pe.py, pe_utils.py,
pe_criterion.py, pe_sampler.py; models/gpt2/modeling_gpt2.py's attn_scalar), re-derived here in float64, and its two
objectives reaching training."""

import math
import warnings

import torch
import torch.nn.functional as F

from posbench.pe.seqpe import digits
from posbench.pe.seqpe_objectives import ObjectiveConfig, candidates, contrastive_loss, hard_negative, transfer_loss
from tests.conftest import build_test_model


def authors_vectors(pe, positions):
    """SequentialPE.forward in float64: digits left-padded ('123' -> 0 0 1 2 3), digit + slot embeddings, [CLS] last,
    GPT-2 blocks with a causal mask over the whole digit sequence (mask_padding off), final LayerNorm, out_proj."""
    W = {n: p.detach().double() for n, p in pe.named_parameters()}
    seqs = torch.tensor([[int(c) for c in str(p).rjust(pe.n_digits, "0")] for p in positions])
    x = W["digit_emb.weight"][seqs] + W["slot_emb.weight"]
    x = torch.cat((x, W["cls"].expand(len(x), -1, -1)), dim=1)
    N, L, E = x.shape

    def ln(x, name):
        return F.layer_norm(x, (E,), W[name + ".weight"], W[name + ".bias"], 1e-5)

    def lin(x, name):
        return x @ W[name + ".weight"].T + W[name + ".bias"]

    for b, block in enumerate(pe.blocks):
        h, nh = f"blocks.{b}.", block.heads
        q, k, v = lin(ln(x, h + "ln_1"), h + "c_attn").view(N, L, 3, nh, E // nh).permute(2, 0, 3, 1, 4)
        w = (q @ k.transpose(-1, -2) / math.sqrt(E // nh)).masked_fill(~torch.ones(L, L).tril().bool(), -1e30)
        x = x + lin((w.softmax(-1) @ v).transpose(1, 2).reshape(N, L, E), h + "c_proj")
        u = lin(ln(x, h + "ln_2"), h + "c_fc")
        gelu_new = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))
        x = x + lin(gelu_new, h + "mlp_proj")
    return lin(ln(x, "ln_f")[:, -1], "out_proj") / pe.cfg.temperature


def test_digits_are_left_padded():
    assert digits(torch.tensor([123.0, 0.0, 19999.0]), 5).tolist() == [[0, 0, 1, 2, 3], [0] * 5, [1, 9, 9, 9, 9]]


def test_the_logit_term_is_the_authors_attn_scalar():
    """Layer logits minus NoPE's on the same weights: (Wq p_i + bq)_h . (Wk p_j + bk)_h / sqrt(K) * scalar_scale, as
    GPT2Attention.forward's attn_scalar with the single pe_qk map."""
    ours, nope = build_test_model("seqpe").eval(), build_test_model("none").eval()
    nope.load_state_dict(ours.state_dict(), strict=False)
    idx = torch.randint(0, 61, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # layer 0, where both read the same residual stream
        diff = ours.attention_scores(idx)[0] - nope.attention_scores(idx)[0]
    pe, H, K = ours.pe, 4, 8
    p = authors_vectors(pe, range(10))
    pqk = p @ pe.pe_qk.weight.detach().double().T + pe.pe_qk.bias.detach().double()
    pq, pk = (t.reshape(10, H, -1).transpose(0, 1) for t in pqk.chunk(2, dim=-1))
    want = pq @ pk.transpose(-1, -2) / math.sqrt(K) * pe.cfg.scalar_scale
    causal = torch.ones(10, 10).tril().bool()
    assert want[:, causal].abs().max() > 0.05  # the contract's scalar_scale makes the term visible
    torch.testing.assert_close(diff[:, :, causal].double(), want[:, causal].expand(2, -1, -1), rtol=1e-3, atol=1e-4)


def test_a_position_needs_no_more_digits_than_the_encoder_has():
    pe = build_test_model("seqpe").pe
    assert pe.n_digits == 5 and pe.max_positions == 100_000  # pe.max_position 20000: digits of 19999


def test_the_contrastive_loss_is_cross_entropy_toward_the_nearest():
    g = torch.Generator().manual_seed(0)
    piv, cand = torch.randn(3, 6, generator=g, dtype=torch.float64), torch.randn(3, 5, 6, generator=g,
                                                                             dtype=torch.float64)
    labels = torch.tensor([0, 4, 2])
    logits = [[float(piv[b] @ cand[b, c]) for c in range(5)] for b in range(3)]
    want = sum(-logits[b][labels[b]] + math.log(sum(math.exp(z) for z in logits[b])) for b in range(3)) / 3
    assert abs(float(contrastive_loss(piv, cand, labels)) - want) < 1e-9


def test_the_transfer_loss_is_the_authors_symmetric_kl():
    g = torch.Generator().manual_seed(1)
    main, far = torch.randn(2, 5, 8, generator=g, dtype=torch.float64), torch.randn(2, 5, 8, generator=g,
                                                                                 dtype=torch.float64)
    H = 2  # SeqPeTransferCriterion.forward, multi-head, beta 1, metric kl_div, written as the authors do
    m = main.reshape(2, 5, H, -1).permute(0, 2, 1, 3)
    t = far.reshape(2, 5, H, -1).permute(0, 2, 1, 3)
    train_dist = F.log_softmax(m @ m.transpose(-1, -2), dim=-1)
    trans_dist = F.log_softmax(t @ t.transpose(-1, -2), dim=-1)
    with warnings.catch_warnings():  # torch's notice that reduction 'mean' (the authors') will change meaning
        warnings.simplefilter("ignore", UserWarning)
        want = (F.kl_div(input=trans_dist, target=train_dist.detach(), log_target=True)
                + F.kl_div(input=train_dist.detach(), target=trans_dist, log_target=True))
    torch.testing.assert_close(transfer_loss(main, far, H), want)


def test_negatives_are_distinct_other_positions_and_hard_ones_are_digit_edits():
    import random

    cfg, rng = ObjectiveConfig(), random.Random(0)
    for pivot in (0, 7, 123, 19999):
        c = candidates(pivot, cfg, 5, rng)
        assert len(c) == 32 == len(set(c)) and pivot not in c and all(0 <= x < 20000 for x in c)
    edited = {hard_negative(123, 20000, 5, rng) for _ in range(200)}
    assert 123 not in edited and all(0 <= x < 20000 for x in edited)
    # one edit of 123: insert (1023, 1203, 4123, ...), swap (213, 321, 132), replace (923, 103), delete (12, 13, 23)
    assert {12, 13, 23, 213, 321, 132} & edited and any(x >= 1000 for x in edited)


def test_training_adds_both_objectives_and_evaluation_none():
    small = ["pe.random_shift_rate=0", "pe.contrastive_batch=4", "pe.transfer_batch=4"]
    model = build_test_model("seqpe", overrides=small)
    idx = torch.randint(0, 61, (2, 65), generator=torch.Generator().manual_seed(2))
    torch.manual_seed(0)
    out = model.train()(idx[:, :-1], idx[:, 1:])
    assert out.aux_loss is not None and out.aux_loss > 0
    out.aux_loss.backward()  # the objectives train the digit encoder, not the query/key map
    assert model.pe.out_proj.weight.grad.abs().sum() > 0 and model.pe.pe_qk.weight.grad is None
    assert model.eval()(idx[:, :-1], idx[:, 1:]).aux_loss is None
    off = build_test_model("seqpe", overrides=["pe.contrastive_weight=0", "pe.transfer_weight=0"]).train()
    assert float(off(idx[:, :-1], idx[:, 1:]).aux_loss) == 0.0
    # a window shorter than the 32 distilled offsets (a task's 16 tokens) distils all of its offsets
    short = build_test_model("seqpe", overrides=small + ["pe.contrastive_weight=0"], seq_len=16).train()
    assert float(short(idx[:, :16], idx[:, 1:17]).aux_loss.detach()) > 0


def test_training_shifts_a_batch_to_one_of_the_drawn_starts():
    pe = build_test_model("seqpe", overrides=["pe.random_shift_rate=1"]).pe.train()
    starts = set(pe.starts.tolist())
    assert len(pe.starts) == 320 and max(starts) <= 20000 - 64
    for _ in range(5):
        pos = pe.positions(8, "cpu")
        assert int(pos[0]) in starts and pos.tolist() == list(range(int(pos[0]), int(pos[0]) + 8))
    assert pe.eval().positions(3, "cpu").tolist() == [0.0, 1.0, 2.0]
