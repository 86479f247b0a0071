"""Greedy decoding with the KV cache equals decoding by re-running the whole sequence, per PE family;
batching by length returns every prompt's own answer; positions beyond a learned table give None."""

import pytest
import torch

from posbench.evaluation.generate import greedy_cached, greedy_generate, greedy_recompute, supports_cache
from tests.evaluation.helpers import ScriptedModel, small_model

PROMPTS = [[5, 9, 2, 7, 7, 1], [3, 3, 3], [8, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3], [4, 4, 4]]
N_NEW = [7, 4, 7, 9, 4]


def reference(model, prompt, n_new):
    """Written here: the whole sequence through the model at every step, argmax of the last logits."""
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(n_new):
            logits = model(torch.tensor([seq])).logits[0, -1]
            seq.append(int(logits.argmax()))
    return seq[len(prompt):]


@pytest.mark.parametrize("pe,extra", [("rope", []), ("alibi", []), ("learned", []), ("none", []),
                                      ("hybrid", ["model.n_layers=4"]), ("t5", []), ("pope", []), ("fope", []),
                                      ("rope", ["pe.rotary_fraction=0.5", "pe.scaling.name=llama3",
                                                "pe.scaling.factor=4"])])
def test_cached_generation_equals_uncached(pe, extra):
    # init_std 0.3: peaked logits, so a greedy choice never hangs on float noise between the two paths
    model, _ = small_model(pe, "model.init_std=0.3", *extra, seed=1)
    assert supports_cache(model)
    got = greedy_generate(model, PROMPTS, N_NEW, "cpu", batch_size=2)
    assert got == [reference(model, p, n) for p, n in zip(PROMPTS, N_NEW)]
    batch = torch.tensor([PROMPTS[0], PROMPTS[2]])
    assert torch.equal(greedy_cached(model, batch, 7), greedy_recompute(model, batch, 7))
    # the cached logits themselves match the full forward, not only their argmax
    full = reference(model, PROMPTS[3], 5)
    seq = torch.tensor([PROMPTS[3] + full])
    with torch.no_grad():
        whole = model(seq).logits
        cache = model.new_cache()
        parts = [model(seq[:, :12], cache=cache).logits] + [model(seq[:, t:t + 1], cache=cache).logits
                                                           for t in range(12, 17)]
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, rtol=1e-4, atol=1e-5)


def test_randomized_positions_decode_without_cache():
    model, _ = small_model("randomized", "pe.max_positions=256", "model.init_std=0.3")
    assert not supports_cache(model)  # positions are drawn for a whole sequence
    got = greedy_generate(model, PROMPTS[:2], N_NEW[:2], "cpu")
    assert got == [reference(model, p, n) for p, n in zip(PROMPTS[:2], N_NEW[:2])]


def test_learned_table_too_short_gives_none_not_an_exception():
    model, _ = small_model("learned", seq_len=16)
    prompts = [[1] * 10, [2] * 14, [3] * 16, [4] * 12]
    # positions needed: prompt + n_new - 1 (the last new token is never fed back)
    got = greedy_generate(model, prompts, [7, 3, 1, 6], "cpu")
    assert got[0] == reference(model, prompts[0], 7) and got[1] == reference(model, prompts[1], 3)
    assert got[2] is not None and got[3] is None  # 16 + 1 - 1 = 16 fits; 12 + 6 - 1 = 17 does not


def test_prompts_of_equal_length_share_a_batch():
    model = ScriptedModel(10, lambda hist: (sum(hist) % 10))
    prompts = [[1, 2], [3, 4], [5], [6, 7], [8]]
    got = greedy_generate(model, prompts, [3, 3, 2, 3, 2], "cpu", batch_size=8)
    # (batch, tokens) per forward: [5] and [8] prefilled together, one more step; then the three pairs
    assert model.calls == [(2, 1), (2, 1), (3, 2), (3, 1), (3, 1)]
    for p, out in zip(prompts, got):
        hist = list(p)
        for token in out:
            assert token == sum(hist) % 10
            hist.append(token)
