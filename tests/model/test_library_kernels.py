"""model.kernels (model/library_kernels.py): each library option against posbench's torch path (values and
gradients) where the package runs on the CPU, its refusal (one line, before any work) where it does not or is not
installed; the option is no part of a run's identity."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.model.build import build_model
from posbench.model.kernels_config import PIECES, KernelsConfig
from posbench.model.library_kernels import LibraryKernel
from posbench.training.rundir import identity

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = [(piece, name) for piece, registry in PIECES.items() for name in registry.names() if name != "torch"]


def built(*overrides):
    cfg = load_config(model_size="nano", overrides=["model.n_layers=2", "model.seq_len=32", "model.vocab_size=512",
                                                   *overrides])
    torch.manual_seed(0)
    return cfg, build_model(cfg.model, cfg.pe, "cpu", 16, cfg.model.kernels)


def loss_and_grads(model, vocab: int):
    ids = torch.randint(0, vocab, (2, 33), generator=torch.Generator().manual_seed(1))
    targets = ids[:, 1:].clone()
    targets[0, :5] = -100  # ignored targets count in neither the mean nor the gradient
    model.zero_grad(set_to_none=True)
    loss = model(ids[:, :-1], targets).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_every_option_is_registered_with_its_packages():
    assert {"torch", "liger_flce", "cce"} == set(PIECES["loss"].names())
    assert {"torch", "liger"} == set(PIECES["norm"].names()) == set(PIECES["mlp"].names())
    for piece, name in OPTIONS:
        assert PIECES[piece].get(name).packages  # a library option names what it needs
    assert all(PIECES[p].get("torch").supports(d) is None for p in PIECES for d in ("cpu", "cuda"))


def test_a_missing_package_is_said_with_the_install_line():
    class Missing(LibraryKernel):
        name = "missing"
        packages = ("posbench_no_such_package",)

    assert Missing.available() == "posbench_no_such_package is not installed (pip install -e '.[kernels]')"
    assert Missing.supports("cuda") == Missing.available()


@pytest.mark.parametrize("piece,name", [o for o in OPTIONS if "cpu" not in PIECES[o[0]].get(o[1]).devices])
def test_triton_only_options_are_refused_on_cpu_in_one_line(piece, name):
    with pytest.raises(ConfigError) as e:
        built(f"model.kernels.{piece}={name}")
    message = str(e.value)
    assert message.startswith(f"model.kernels.{piece}={name} cannot run on cpu: ") and "\n" not in message
    reason = "is not installed" if PIECES[piece].get(name).available() else "runs on cuda only"
    assert reason in message and message.endswith(f"use model.kernels.{piece}=torch")


@pytest.mark.skipif(importlib.util.find_spec("cut_cross_entropy") is None or importlib.util.find_spec("triton") is None,
                    reason="cut-cross-entropy is not installed (pip install -e '.[kernels]')")
def test_cut_cross_entropy_equals_the_torch_loss_on_cpu():
    cfg, torch_model = built()
    _, cce_model = built("model.kernels.loss=cce")
    cce_model.load_state_dict(torch_model.state_dict())
    ref_loss, ref_grads = loss_and_grads(torch_model, cfg.model.vocab_size)
    loss, grads = loss_and_grads(cce_model, cfg.model.vocab_size)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    # a step that logs the logit statistics gets them (posbench's fused loss computes them on the way)
    ids = torch.randint(0, cfg.model.vocab_size, (2, 33), generator=torch.Generator().manual_seed(1))
    out = cce_model(ids[:, :-1], ids[:, 1:], logit_moments=True)
    logits = torch_model(ids[:, :-1]).logits.float()
    torch.testing.assert_close(out.loss, F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()))
    assert out.logit_moments is not None and float(out.logit_moments[3]) == logits.numel()


def test_a_library_loss_with_full_logits_is_refused():
    with pytest.raises(ConfigError, match="model.kernels.loss=cce fuses the head and the loss"):
        load_config(model_size="nano", overrides=["model.kernels.loss=cce", "train.loss=full"])


def test_kernels_are_no_part_of_the_identity():
    plain = load_config(model_size="nano")
    fused = load_config(model_size="nano", overrides=["model.kernels.loss=cce", "model.kernels.norm=liger"])
    assert identity(plain, "data") == identity(fused, "data")
    assert fused.model.kernels == KernelsConfig(loss="cce", norm="liger")


def test_training_refuses_before_the_run_directory_exists(tmp_path):
    done = subprocess.run([sys.executable, "-m", "posbench", "train", "--model-size", "nano",
                           "model.kernels.mlp=liger", "train.device=cpu", "train.stream=random",
                           f"train.out_dir={tmp_path / 'runs'}", "logging.wandb=disabled"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().startswith("error: model.kernels.mlp=liger cannot run on cpu: ")
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
