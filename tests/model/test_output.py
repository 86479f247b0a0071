"""One return type (a design rule): every architecture's forward returns a ModelOutput with the fields
model/output.py documents, for each mode (targets or not, logit moments asked or not, plain or fused loss)."""

import pytest
import torch
from torch.utils import _pytree

from posbench.config import load_config
from posbench.model.arch import ARCHS
from posbench.model.build import BUILDERS, build_model
from posbench.model.output import ModelOutput

SEP, V = 3, 30
DIMS = ["model.d_model=32", "model.n_heads=2", "model.n_layers=2", "model.d_ff=64", "model.seq_len=24",
        f"model.vocab_size={V}"]
ARCH = {
    "decoder": ["pe.name=rope"],
    "encoder_decoder": ["pe.name=rope", "model.arch.name=encoder_decoder", f"model.arch.source_end={SEP}"],
    "mamba": ["pe.name=none", "model.arch.name=mamba", "model.arch.d_state=4"],
}
# (architecture, loss_chunk_tokens): the decoder's plain and fused losses; the others always make logits
CASES = [("decoder", 0), ("decoder", 8), ("encoder_decoder", 8), ("mamba", 8)]


def _model(arch: str, chunk: int):
    cfg = load_config(overrides=DIMS + ARCH[arch])
    torch.manual_seed(0)
    return build_model(cfg.model, cfg.pe, "cpu", loss_chunk_tokens=chunk)


def _batch():
    g = torch.Generator().manual_seed(1)
    x = torch.randint(4, V, (2, 12), generator=g)
    x[:, 5] = SEP  # `source <sep> target` rows for the encoder-decoder; an ordinary token for the others
    y = torch.randint(4, V, (2, 12), generator=g)
    y[:, :5] = -100
    return x, y


def test_every_registered_architecture_has_a_builder():
    assert set(ARCHS.names()) == set(ARCH)
    for name in ARCHS.names():
        assert any(issubclass(ARCHS[name], cls) for cls in BUILDERS), name


@pytest.mark.parametrize("arch,chunk", CASES)
@pytest.mark.parametrize("grad", [True, False], ids=["train", "no_grad"])
def test_fields_for_each_mode(arch, chunk, grad):
    model = _model(arch, chunk).train(grad)
    x, y = _batch()
    fused = arch == "decoder" and chunk > 0
    with torch.set_grad_enabled(grad):
        plain = model(x)
        assert isinstance(plain, ModelOutput)
        assert plain.loss is None and plain.logit_moments is None and plain.logits.shape == (2, 12, V)
        for moments in (False, True):
            out = model(x, y, logit_moments=moments)
            assert isinstance(out, ModelOutput)
            assert out.loss.shape == () and out.loss.dtype == torch.float32 and torch.isfinite(out.loss)
            assert out.loss.requires_grad == grad
            if fused:  # no logits; their moments only when asked
                assert out.logits is None
                assert (out.logit_moments is not None) == moments
                if moments:
                    assert out.logit_moments.shape == (6,) and not out.logit_moments.requires_grad
            else:
                assert out.logits.shape == (2, 12, V) and out.logit_moments is None
    if grad:
        out.loss.backward()  # the loss of the output carries the gradient
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("arch", list(ARCH))
def test_the_loss_does_not_depend_on_the_mode(arch):
    """Moments asked or not, plain or fused (decoder), the same loss."""
    x, y = _batch()
    with torch.no_grad():
        losses = [_model(arch, chunk)(x, y, logit_moments=m).loss for chunk in (0, 8) for m in (False, True)]
    for loss in losses[1:]:
        torch.testing.assert_close(loss, losses[0], atol=1e-6, rtol=0)


def test_build_model_fixes_the_chunk_for_the_model_life():
    assert _model("decoder", 8).loss_chunk_tokens == 8 and _model("decoder", 0).loss_chunk_tokens == 0
    cfg = load_config(overrides=DIMS + ARCH["decoder"])
    assert build_model(cfg.model, cfg.pe).loss_chunk_tokens == 0  # None: by vocabulary (V < 32768: plain)


def test_the_output_is_a_pytree_of_its_tensors():
    """DDP and FSDP2 find the tensors of a module's output with torch's pytree."""
    loss, logits = torch.zeros(()), torch.zeros(1, 2, 3)
    leaves, spec = _pytree.tree_flatten(ModelOutput(loss=loss, logits=logits))
    assert len(leaves) == 2 and leaves[0] is loss and leaves[1] is logits
    assert _pytree.tree_unflatten(leaves, spec) == ModelOutput(loss=loss, logits=logits)
