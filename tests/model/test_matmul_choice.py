"""model.matmul=auto (model/matmul_choice.py): the decision is a pure function of two measured rates with a margin
for torch's path, the probe measures positive rates at the model's own shapes, and a run records its library so a
resume (or a study's later cells) uses it instead of measuring again."""

import json
import math
import time
from pathlib import Path

import pytest
import torch

from posbench.model import matmul_choice
from posbench.model.matmul import OneDNNLinear, matmul_in
from posbench.model.matmul_choice import (
    MIN_DIM,
    ONEDNN_MARGIN,
    PRODUCT_FLOP,
    choose,
    linear_shapes,
    probe_rates,
    probe_size,
    resolve_matmul,
)
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from tests.model.test_matmul import _model
from tests.training.helpers import nano_config

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


@pytest.mark.parametrize("torch_rate,onednn_rate,want", [
    (100.0, 200.0, "onednn"),  # twice as fast: AVX-512 EPYC
    (100.0, 95.0, "torch"),  # slower: AVX2 EPYC
    (100.0, 105.0, "torch"),  # a near-tie (the probe's own spread) keeps the default path
    (100.0, 109.9, "torch"),
    (100.0, 110.0, "onednn"),  # exactly the margin is enough
    (100.0, 100.0, "torch"),
])
def test_choice_is_oneDNN_only_from_the_margin(torch_rate, onednn_rate, want):
    assert ONEDNN_MARGIN == 1.10
    assert choose({"torch": torch_rate, "onednn": onednn_rate}) == want


def test_the_margin_is_a_parameter():
    rates = {"torch": 100.0, "onednn": 115.0}
    assert choose(rates, margin=1.2) == "torch" and choose(rates, margin=1.1) == "onednn"


def test_shapes_are_the_models_linear_layers():
    """d_model 32, d_ff 64, vocab 11, 2 layers: qkv 32->96, proj 32->32, SwiGLU's gate and up 32->64 and down
    64->32 per layer, the head 32->11 once; the same after the swap to oneDNN."""
    want = ((32, 11, 1), (32, 32, 2), (32, 64, 4), (32, 96, 2), (64, 32, 2))
    assert linear_shapes(_model("torch")) == want
    if torch.backends.mkldnn.is_available():
        assert linear_shapes(_model("onednn")) == want


def test_large_products_are_shrunk_small_ones_kept():
    assert probe_size(2560, 128, 384) == (2560, 384)  # the quickstart's qkv: 7.5e8 FLOPs, kept
    # a 65,536-token head on 8,192 rows of 512: the larger side halves first (outputs to 8,192), then both in turn
    assert probe_size(8192, 512, 65536) == (512, 512)
    assert 6 * 512 * 512 * 512 <= PRODUCT_FLOP < 6 * 1024 * 512 * 512  # one halving fewer would be above the cap
    rows, out = probe_size(100_000, 8192, 4096)  # above the cap even at the floor: stops there, never below it
    assert MIN_DIM <= min(rows, out) and max(rows, out) < 2 * MIN_DIM


@needs_onednn
def test_probe_measures_positive_rates_quickly():
    shapes = ((64, 11, 1), (64, 64, 2), (64, 128, 4), (64, 192, 2), (128, 64, 2))  # d_model 64, d_ff 128
    t0 = time.perf_counter()
    rates = probe_rates(shapes, 512, 1)
    assert time.perf_counter() - t0 < 2.0
    assert set(rates) == {"torch", "onednn"}
    assert all(math.isfinite(r) and r > 1e6 for r in rates.values())  # FLOP/s: any CPU does > 1 MFLOP/s
    assert probe_rates(shapes, 512, 1) is rates  # cached per (shapes, rows, threads)
    assert torch.get_num_threads() >= 1


def _probe_says(monkeypatch, winner: str):
    rates = {"torch": 100.0, "onednn": 300.0} if winner == "onednn" else {"torch": 100.0, "onednn": 80.0}
    monkeypatch.setattr(matmul_choice, "probe_rates", lambda shapes, rows, threads: rates)


@needs_onednn
def test_auto_follows_the_probe_and_is_torch_without_onednn(monkeypatch):
    _probe_says(monkeypatch, "onednn")
    assert matmul_in(_model("auto")) == "onednn"
    _probe_says(monkeypatch, "torch")
    assert matmul_in(_model("auto")) == "torch"
    assert matmul_in(_model("onednn")) == "onednn"  # an explicit setting is never probed
    _probe_says(monkeypatch, "onednn")
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)  # a torch built without oneDNN
    assert not any(type(m) is OneDNNLinear for m in _model("auto").modules())


def test_recorded_choice_is_kept_without_probing(monkeypatch):
    def no_probe(*_):
        raise AssertionError("probed although the run recorded its library")

    monkeypatch.setattr(matmul_choice, "probe_rates", no_probe)
    model = _model("torch")
    assert resolve_matmul("auto", model, 64, recorded="onednn")[0] == "onednn"
    assert resolve_matmul("auto", model, 64, device_type="cuda") == ("torch", "")  # off the CPU: torch's path
    chosen, note = resolve_matmul("torch", model, 64, recorded="onednn")
    assert chosen == "torch" and "trained with onednn" in note


def _meta_matmul(run_dir) -> str:
    return json.loads((Path(run_dir) / "latest" / "meta.json").read_text())["matmul"]


@needs_onednn
def test_resume_reuses_the_recorded_choice(tmp_path, monkeypatch, capsys):
    """A run with auto records what the probe chose; its resume, on a machine where the probe would now choose
    the other library, trains on the recorded one."""
    source = RandomTokens(512, 64)
    _probe_says(monkeypatch, "onednn")
    first = train(nano_config(tmp_path, "model.matmul=auto", "train.max_steps=4"), source)
    assert _meta_matmul(first["run_dir"]) == "onednn"
    _probe_says(monkeypatch, "torch")
    fresh = train(nano_config(tmp_path, "model.matmul=auto", "train.max_steps=4", "train.run_name=fresh"), source)
    assert _meta_matmul(fresh["run_dir"]) == "torch"  # the probe really decides a new run
    capsys.readouterr()
    rest = train(nano_config(tmp_path, "model.matmul=auto", "train.resume=auto", "train.max_steps=6"), source)
    assert rest["step"] == 10 and rest["run_dir"] == first["run_dir"]  # max_steps: this call's steps
    assert _meta_matmul(rest["run_dir"]) == "onednn"
    said = capsys.readouterr()
    assert "matmul: onednn (model.matmul=auto, as the checkpoint being continued recorded)" in said.out + said.err
