"""The first-token attention suite against hand-computed values: with every attention logit 0 a query at position i
spreads 1/(i+1) over its keys (1/(i+1+e^s) beside a learned sink of logit s), so the suite's mean over queries
1..L-1 is a harmonic sum; beyond a learned table the row is n/a."""

import math

import pytest
import torch

from posbench.evaluation.ppl_data import TextFiles
from posbench.evaluation.suites.first_token import FirstTokenAttention, FirstTokenConfig, first_token_mass
from tests.evaluation.helpers import session_for, small_model, target_for, write_text


def evaluator(cfg, text, lengths, windows=3):
    options = FirstTokenConfig(data=TextFiles.Config(paths=[str(text)]), max_windows=windows)
    return FirstTokenAttention(options, target_for(cfg, lengths, batch_size=2))


def flat_logits(model):
    """Zero query and key rows of every layer: every logit 0, whatever the PE rotates."""
    with torch.no_grad():
        for block in model.blocks:
            d = block.attn.proj.in_features
            block.attn.qkv.weight[: 2 * d] = 0.0


def uniform_mass(L: int, sink_logit: float | None = None) -> tuple[float, float]:
    extra = 0.0 if sink_logit is None else math.exp(sink_logit)
    mass = sum(1.0 / (i + 1 + extra) for i in range(1, L)) / (L - 1)
    sink = sum(extra / (i + 1 + extra) for i in range(1, L)) / (L - 1)
    return mass, sink


@pytest.mark.parametrize("pe", ["rope", "none"])
def test_flat_attention_gives_the_harmonic_mean_at_every_length(tmp_path, pe):
    model, cfg = small_model(pe, seq_len=16)
    flat_logits(model)
    result = evaluator(cfg, write_text(tmp_path / "a.txt"), [8, 16, 32]).run(session_for(model))
    for row in result["rows"]:
        expected, _ = uniform_mass(row["length"])
        assert row["na"] is None and row["windows"] == 3
        assert row["layers"] == pytest.approx([expected] * 2, abs=1e-6)
        assert row["mean"] == pytest.approx(expected, abs=1e-6) and row["sink"] == pytest.approx([0.0, 0.0], abs=1e-6)


def test_stick_breaking_with_flat_logits_halves_the_first_token_per_step(tmp_path):
    """beta = sigmoid(0) = 1/2 everywhere: query i gives key 0 the stick left after i - 1 halvings, 0.5^i."""
    model, cfg = small_model("stick_breaking", seq_len=16)
    flat_logits(model)
    row = evaluator(cfg, write_text(tmp_path / "a.txt"), [16]).run(session_for(model))["rows"][0]
    assert row["mean"] == pytest.approx(sum(0.5 ** i for i in range(1, 16)) / 15, abs=1e-6)


def test_a_learned_sink_takes_its_share_from_the_first_token(tmp_path):
    model, cfg = small_model("rope", "model.attention_sinks=true", seq_len=16)
    flat_logits(model)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.sinks.fill_(0.7)
    row = evaluator(cfg, write_text(tmp_path / "a.txt"), [16]).run(session_for(model))["rows"][0]
    mass, sink = uniform_mass(16, 0.7)
    assert row["mean"] == pytest.approx(mass, abs=1e-6) and row["sink"] == pytest.approx([sink, sink], abs=1e-6)
    assert mass < uniform_mass(16)[0]


def test_hand_built_probabilities():
    p = torch.zeros(1, 2, 3, 3)
    p[0, 0, 1, :2] = torch.tensor([0.25, 0.75])
    p[0, 0, 2] = torch.tensor([0.5, 0.25, 0.25])
    p[0, 1, 1, :2] = torch.tensor([1.0, 0.0])
    p[0, 1, 2] = torch.tensor([0.1, 0.1, 0.4])  # 0.4 of this row went to a sink
    mass, sink = first_token_mass([p])
    assert mass == pytest.approx([(0.25 + 0.5 + 1.0 + 0.1) / 4]) and sink == pytest.approx([0.4 / 4])


def test_past_a_learned_table_the_row_is_na_and_the_report_says_so(tmp_path):
    model, cfg = small_model("learned", seq_len=16)
    ev = evaluator(cfg, write_text(tmp_path / "a.txt"), [16, 32])
    result = ev.run(session_for(model))
    assert result["rows"][0]["mean"] is not None and result["rows"][1]["na"] and result["rows"][1]["mean"] is None
    text = FirstTokenAttention.markdown(result)
    assert "32: n/a" in text and "first token" in text
    assert "| 16 |" in FirstTokenAttention.comparison({"a": result, "b": result})
