"""LAMBADA: last-word accuracy and perplexity, checked against a per-passage computation written here."""

import json
import math

import pytest
import torch

from posbench.errors import ConfigError, DataError
from posbench.evaluation.eval_config import load_eval_config
from posbench.evaluation.suites.lambada import Lambada, LambadaConfig, split_last_word
from tests.evaluation.helpers import BYTES, WORDS, session_for, small_model, target_for


def passages(path, n=12, seed=0):
    import random

    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 30))) for _ in range(n)]
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return texts


def by_hand(model, text, train_len):
    """One passage at a time, full logits, no padding: the reference the batched suite must equal."""
    context, word = text.rsplit(" ", 1)
    ids = ([BYTES.bos_id] + list(context.encode()) + list((" " + word).encode()))[-(train_len + 1):]
    n = len((" " + word).encode())
    x = torch.tensor([ids[:-1]])
    logp = torch.log_softmax(model(x).logits.float()[0], -1)
    rows = range(len(ids) - 1 - n, len(ids) - 1)
    nll = -sum(logp[t, ids[t + 1]].item() for t in rows)
    greedy = all(logp[t].argmax().item() == ids[t + 1] for t in rows)
    return greedy, nll


def test_split_last_word():
    assert split_last_word(" the cat sat \n") == ("the cat", " sat")
    with pytest.raises(DataError):
        split_last_word("alone")


@pytest.mark.parametrize("train_len", [64, 24])  # 24: long passages are cut from the left
def test_accuracy_and_perplexity_equal_a_per_passage_computation(tmp_path, train_len):
    texts = passages(tmp_path / "lambada.jsonl")
    model, cfg = small_model("rope", seq_len=train_len, vocab=300)
    ev = Lambada(LambadaConfig(path=str(tmp_path / "lambada.jsonl")), target_for(cfg, [train_len], batch_size=5))
    assert ev.work() == len(texts)
    result = ev.run(session_for(model))
    refs = [by_hand(model, t, train_len) for t in texts]
    assert result["accuracy"] == sum(g for g, _ in refs) / len(texts)
    mean_nll = sum(n for _, n in refs) / len(texts)
    assert result["nll"] == pytest.approx(mean_nll, rel=1e-4)
    assert result["ppl"] == pytest.approx(math.exp(mean_nll), rel=1e-4)
    assert "accuracy" in Lambada.markdown(result) and "m" in Lambada.comparison({"m": result})


def test_lambada_is_asked_by_name_and_fails_at_plan_time_without_data(tmp_path):
    assert "lambada" not in load_eval_config().suite_list()
    cfg = load_eval_config(overrides=["suites=[lambada]", "lambada.max_examples=3"])
    assert cfg.suite_list() == ["lambada"] and cfg.lambada.max_examples == 3
    with pytest.raises(ConfigError, match="max_examples"):
        load_eval_config(overrides=["lambada.max_examples=-1"])
    _, run_cfg = small_model("rope", f"data.root={tmp_path}", vocab=300)
    with pytest.raises(DataError, match="prepare_data lambada"):
        Lambada(LambadaConfig(), target_for(run_cfg, [64]))
