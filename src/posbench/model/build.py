"""`build_model`: the one place that turns a model config into a module.

`model.arch` is a config type (model/arch.py); `BUILDERS` pairs each with the class it builds. The model
classes read `ModelConfig`, which names the architecture configs, so neither side may import the other at
run time (tests/repo/test_import_direction.py forbids import cycles): this module sits above both.

Settings of the run that shape the module but are not `model.*` keys arrive typed as arguments here and
are fixed for the model's life (design rule: nothing is set on a model after it is built):
`loss_chunk_tokens`, from `train.loss` and `train.loss_chunk_tokens` (`model.loss.auto_chunk_tokens`), and
`kernels`, `model.kernels` (model/kernels_config.py: the loss, norm and MLP implementations; the decoder's), which
only training passes: evaluation and export build torch's.
`model.matmul` swaps the built module's linear layers here, after the builder (model/matmul.py); `auto` is the
library measured faster at the model's shapes (model/matmul_choice.py), unless the caller passes its own choice.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from posbench.model.arch import ARCHS, ArchConfig, DecoderArch, EncoderDecoderArch, MambaArch
from posbench.model.encdec import EncoderDecoder
from posbench.model.kernels import check_backward
from posbench.model.kernels_config import KernelsConfig
from posbench.model.matmul import AUTO, apply_matmul
from posbench.model.matmul_choice import resolve_matmul
from posbench.model.model_config import ModelConfig
from posbench.model.transformer import Transformer
from posbench.pe import PEConfig


def _decoder(cfg: ModelConfig, pe_cfg: PEConfig, arch: DecoderArch, device_type: str, chunk: int | None,
             kernels: KernelsConfig):
    return Transformer(cfg, pe_cfg, device_type, loss_chunk_tokens=chunk, kernels=kernels)


# The fused chunked loss (model/loss.py) is the decoder's: the encoder-decoder and Mamba always make full logits.
def _encoder_decoder(cfg: ModelConfig, pe_cfg: PEConfig, arch: EncoderDecoderArch, device_type: str,
                     chunk: int | None, kernels: KernelsConfig):
    return EncoderDecoder(cfg, pe_cfg, arch, device_type)


def _mamba(cfg: ModelConfig, pe_cfg: PEConfig, arch: MambaArch, device_type: str, chunk: int | None,
           kernels: KernelsConfig):
    # imported here: the `mambapy` package is only needed by a Mamba run (a GPU image without it trains decoders)
    from posbench.model.mamba import MambaLM

    return MambaLM(cfg, pe_cfg, arch, device_type)


# config type -> (model config, PE config, that arch config, device type, loss chunk tokens, kernels) -> module
BUILDERS: dict[type[ArchConfig], Callable[..., nn.Module]] = {
    DecoderArch: _decoder,
    EncoderDecoderArch: _encoder_decoder,
    MambaArch: _mamba,
}


def build_model(model_cfg: ModelConfig, pe_cfg: PEConfig, device_type: str = "cpu",
                loss_chunk_tokens: int | None = None, kernels: KernelsConfig | None = None,
                matmul: str | None = None, train: bool = False) -> nn.Module:
    """The module `model.arch` names (Transformer, EncoderDecoder or MambaLM). `loss_chunk_tokens`: tokens per
    chunk of the decoder's fused head + loss, 0 for plain logits, None for the default by vocabulary; `kernels`:
    model.kernels (None: torch's for every piece). `matmul`: the linear layers' library when the caller has chosen
    it (training/start.py resolves model.matmul=auto with its step's rows and the checkpoint's record); None:
    model.matmul, `auto` measured at one sequence's rows. `train`: the model is built to be trained, so every
    attention kernel it chose must have a backward pass on `device_type` (FlexAttention has none on CPU): refused
    here, before a run directory exists."""
    arch = model_cfg.arch
    kernels = kernels or KernelsConfig()  # not-default on another architecture: refused by ModelConfig.check
    builder = next((BUILDERS[cls] for cls in type(arch).__mro__ if cls in BUILDERS), None)
    if builder is None:
        raise TypeError(f"model.arch `{arch.name}` ({type(arch).__qualname__}) has no entry in "
                        f"posbench.model.build.BUILDERS; registered: {', '.join(ARCHS.names())}")
    model = builder(model_cfg, pe_cfg, arch, device_type, loss_chunk_tokens, kernels)
    if train:
        check_backward(model, device_type, model_cfg.packing)
    # model.matmul: the library of the linear layers' products, chosen once here (model/matmul.py)
    if matmul is None and model_cfg.matmul == AUTO and any(p.is_meta for p in model.parameters()):
        matmul = "torch"  # a model for its shapes and counts only (built on meta): nothing to measure auto on
    return apply_matmul(model, matmul or resolve_matmul(model_cfg.matmul, model, model_cfg.seq_len, device_type)[0])
