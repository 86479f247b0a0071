"""Trying a checkpoint: greedy continuation and the attention of the generated tokens."""

import numpy as np
import pytest
import torch

from posbench.app.probe import continue_ids, generated_attention, task_prompt
from posbench.config_loader import from_dict
from posbench.data.tasks.task import TaskConfig, build_task
from posbench.evaluation.generate import greedy_recompute
from tests.evaluation.helpers import small_model


@pytest.mark.parametrize("pe", ["rope", "alibi", "learned", "cable", "stick_breaking"])
def test_continuation_and_its_attention(pe):
    model, _ = small_model(pe, vocab=40)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    new = continue_ids(model, prompt, 5)
    assert new == greedy_recompute(model, torch.tensor([prompt]), 5)[0].tolist()  # cache-free reference
    probs = np.array(generated_attention(model, prompt, new))  # (L, H, N, K)
    assert probs.shape == (2, 4, 5, len(prompt) + 4)
    assert np.allclose(probs.sum(-1), 1.0, atol=1e-5)
    for n in range(5):  # the query producing new token n sits at position len(prompt) - 1 + n: causal
        assert np.all(probs[:, :, n, len(prompt) + n:] == 0)


def test_learned_table_too_short_is_na():
    model, _ = small_model("learned", vocab=40, seq_len=8)
    assert continue_ids(model, list(range(1, 8)), 4) is None


def test_task_prompt_stops_at_the_first_target():
    task = build_task(from_dict(TaskConfig, {"name": "k_back", "k": 2}))
    ex = task.example(0, 3, "id")
    prompt, expected = task_prompt(task, 0, 3, "id")
    first = next(t for t, y in enumerate(ex.targets_T) if y != -100)
    assert prompt == ex.tokens_T[: first + 1].tolist()
    assert expected == [int(y) for y in ex.targets_T if y != -100] and len(expected) >= 1


def test_separators_are_not_answer_tokens():
    """A text answer " the the the" (bytes: spaces between the symbols): a continuation of spaces scored 6/22
    before; only the tokens that are not separators count, as the task scores them."""
    from posbench.app.probe import scored_tokens, tokens_right
    from tests.evaluation.helpers import BYTES as tok

    expected = tok.encode(" the the the")
    scored = scored_tokens(expected, tok.decode)
    assert sum(scored) == 9 and not any(s for s, t in zip(scored, expected) if t == ord(" "))
    assert tokens_right(tok.encode("            "), expected, scored) == (0, 9)
    assert tokens_right(tok.encode(" the th"), expected, scored) == (5, 9)  # a short continuation: the rest wrong
