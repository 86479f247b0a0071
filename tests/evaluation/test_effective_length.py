"""Effective length on hand-made score tables: the in-distribution cell, the keep threshold, the baseline, a dip
that ends it, n/a lengths, and the n/a cases with their reasons."""

import pytest

from posbench.evaluation.effective_length import effective_length

BASE = {64: 0.1, 128: 0.1, 256: 0.1, 512: 0.1, 1024: 0.1}


def eff(scores, keep=0.8, baselines=BASE, train_len=128, na=None):
    return effective_length(scores, baselines, train_len, keep, na)


def test_longest_length_keeping_the_share_of_the_id_score():
    # ID = 128 (the training length): 0.9; threshold 0.72; 256 keeps 0.75, 512 drops to 0.5
    out = eff({64: 1.0, 128: 0.9, 256: 0.75, 512: 0.5, 1024: 0.8})
    assert out["length"] == 256 and out["id_length"] == 128 and out["id_score"] == 0.9
    assert out["threshold"] == pytest.approx(0.72)
    assert out["limit"] == "512 tokens scores 50.0% (threshold 72.0%, baseline 10.0%)"


def test_a_dip_ends_it_even_when_longer_lengths_recover():
    assert eff({128: 0.9, 256: 0.5, 512: 0.9})["length"] == 128


def test_the_baseline_binds_when_it_is_above_the_keep_threshold():
    # keep 0.5 of 0.6 = 0.3, but 256 scores only the baseline 0.35 there
    out = eff({128: 0.6, 256: 0.35, 512: 0.6}, keep=0.5, baselines={128: 0.1, 256: 0.35, 512: 0.1})
    assert out["length"] == 128 and "baseline 35.0%" in out["limit"]


def test_every_length_passing_is_open_ended():
    out = eff({128: 0.5, 256: 0.5, 512: 0.45})
    assert out["length"] == 512 and out["limit"].startswith("passes at every tested length")


def test_the_id_length_is_the_longest_tested_inside_the_training_length():
    out = eff({64: 0.8, 200: 0.7, 400: 0.7}, train_len=256, baselines={})
    assert out["id_length"] == 200 and out["id_score"] == 0.7 and out["length"] == 400


def test_na_lengths_stop_the_walk_with_their_reason():
    out = eff({128: 0.9, 256: 0.9, 512: None}, na={512: "the PE represents at most 256 positions"})
    assert out["length"] == 256 and out["limit"] == "512 tokens is n/a: the PE represents at most 256 positions"


@pytest.mark.parametrize("scores,na,reason", [
    ({256: 0.9, 512: 0.9}, None, "no tested length within the training length (128)"),
    ({64: 0.9, 128: None, 256: 0.9}, {128: "128 tokens cannot hold the question"},
     "the in-distribution cell (128 tokens) is n/a: 128 tokens cannot hold the question"),
    ({128: 0.1, 256: 0.0}, None, "the in-distribution score 10.0% is not above the baseline 10.0%"),
])
def test_na_cases(scores, na, reason):
    out = eff(scores, na=na)
    assert out["length"] is None and out["na"] == reason


def test_keep_must_be_a_share():
    with pytest.raises(ValueError, match="keep"):
        eff({128: 1.0}, keep=0.0)
