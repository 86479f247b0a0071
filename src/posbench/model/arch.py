"""`model.arch`: which sequence model a run builds, a polymorphic config section like `pe`.

    model.arch.name=decoder                                   # the decoder-only transformer (default)
    model.arch.name=encoder_decoder model.arch.decoder_pe.name=sininit
    model.arch.name=mamba model.arch.d_state=16

Each architecture is a registered Config dataclass with its own options (strict: `mamba` has no
`decoder_pe`). This module only describes them: it imports no model class, and `model/build.py`
(`build_model`) is the one place that pairs each config type with the module it builds, so the configs
(read by `model/model_config.py`) and the model classes (which read `ModelConfig`) never import each other.

Every architecture speaks the decoder's interface, so the training loop, the checkpoint loader and the
study scorer need no branch on the name: `forward(idx_BT, targets_BT=None, *, logit_moments=False)` ->
`ModelOutput` (model/output.py: loss, logits, logit moments), `new_cache()`, `attention_scores(idx_BT)` and
`attention_probs(idx_BT)` (lists per layer, empty when there is no attention; the probabilities leave out a learned
sink's share).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from posbench.config_loader import Checked
from posbench.errors import ConfigError
from posbench.pe.encoding import PEConfig, PEContext
from posbench.pe.none import NoPE
from posbench.registry import Registry


@dataclass
class ArchConfig(Checked):
    """Base of every architecture's Config; `name` selects the registered architecture."""

    name: str = "decoder"
    default_name: ClassVar[str] = "decoder"
    summary: ClassVar[str] = ""
    # what a reader of a report should know about the PE axis for this architecture
    pe_note: ClassVar[str] = ""
    # why eval.py (text in, next token out) cannot score it; "" for a language model
    not_a_language_model: ClassVar[str] = ""

    def check(self) -> None:
        """Validate this architecture's own fields; raise ConfigError with what to change."""

    def check_model(self, ctx: PEContext, pe_cfg: PEConfig) -> None:
        """Checks that need the model's dimensions or the run's PE (config.resolve(), before any work)."""

    def for_task(self, source_end: int | None, ood_len: int) -> ArchConfig:
        """This config bound to a task (studies): `source_end` ends the source in `source <source_end>
        target` rows (None: the task has no such form), `ood_len` is the longest row evaluated. Most
        architectures read the row as one sequence and need neither."""
        return self

    @classmethod
    def registry_lookup(cls, name: str, where: str = "model.arch") -> type[ArchConfig]:
        return ARCHS.get(name, f"{where}.name")


def _check(name: str, cls) -> None:
    if not (isinstance(cls, type) and issubclass(cls, ArchConfig)):
        raise TypeError(f"{cls!r} must subclass ArchConfig")
    if not cls.summary:
        raise TypeError(f"{cls.__name__} needs a one-line `summary`")


# The registered classes are the configs themselves: register() derives each with `name` defaulting to
# the registered name.
ARCHS = Registry("model architecture", _check, configs=True)


@ARCHS.register("decoder")
@dataclass
class DecoderArch(ArchConfig):
    summary: ClassVar[str] = "decoder-only transformer (model/transformer.py)"


@ARCHS.register("encoder_decoder")
@dataclass
class EncoderDecoderArch(ArchConfig):
    n_decoder_layers: int = 0  # 0: model.n_layers (the encoder's depth)
    # the decoder stack's PE; `pe` is the encoder's. Any registered PE.
    decoder_pe: PEConfig = field(default_factory=NoPE.Config)
    # token id that ends the source part of a row (`source <source_end> target`); set from the task
    # by the study runner (Task.source_end_token), -1 = not bound yet
    source_end: int = -1
    summary: ClassVar[str] = "encoder-decoder transformer: bidirectional encoder, causal decoder, cross-attention"
    not_a_language_model: ClassVar[str] = (
        "it maps a source to a target (rows `source <source_end> target`), so perplexity of free text, "
        "passkey and needle retrieval do not apply; the study runner scores it (scripts/study.py)")
    pe_note: ClassVar[str] = ("`pe` is the encoder's PE, `model.arch.decoder_pe` the decoder's; absolute PEs add to "
                              "each stack's embeddings, rotary and bias PEs act in self-attention only; "
                              "cross-attention is content-only")

    def check(self):
        if self.n_decoder_layers < 0:
            raise ConfigError(f"model.arch.n_decoder_layers must be >= 0, got {self.n_decoder_layers}")

    def check_model(self, ctx, pe_cfg):
        from posbench.pe import PES
        from posbench.pe.encoding import decoder_only, reads_tokens

        PES.get(self.decoder_pe.name).check_model(self.decoder_pe, ctx)
        for member in [self.decoder_pe, pe_cfg, *getattr(pe_cfg, "pattern", [])]:
            if decoder_only(PES.get(member.name)):  # a state through the layers (TAPE), an own loss (SeqPE)
                raise ConfigError(f"pe `{member.name}` needs the decoder-only transformer (model.arch.name=decoder): "
                                  "the encoder-decoder carries no PE state between layers and adds no PE objective")
        for member in [pe_cfg, *getattr(pe_cfg, "pattern", [])]:
            if reads_tokens(PES.get(member.name)):  # FoX's decay and CoPE's counts run over earlier keys only
                raise ConfigError(f"pe `{member.name}` is defined for causal self-attention, not the bidirectional "
                                  "encoder; give it to the decoder (model.arch.decoder_pe.name) and pick another "
                                  "encoder pe")

    def for_task(self, source_end, ood_len):
        if source_end is None:
            raise ConfigError("model.arch.name=encoder_decoder needs a task with a source/target form "
                              "(rows `source <sep> target`, e.g. pig_latin, reverse, sort); this task has none")
        decoder_pe = dataclasses.replace(self.decoder_pe)
        # as for `pe` (studies/cell_config.py): a table PE must cover the OOD rows for OOD to be measurable; its
        # rows past the training length stay untrained, which is what the study probes
        if getattr(decoder_pe, "max_positions", 0) is None:
            decoder_pe.max_positions = ood_len
        return dataclasses.replace(self, source_end=source_end, decoder_pe=decoder_pe)


@ARCHS.register("mamba")
@dataclass
class MambaArch(ArchConfig):
    """Mamba (Gu & Dao 2023) blocks from the `mambapy` package; `model.n_layers` blocks of width d_model."""

    d_state: int = 16  # N, the SSM state size per channel
    expand: int = 2  # E: the block's inner width is E * d_model
    d_conv: int = 4  # the causal depthwise convolution's width
    dt_rank: int = 0  # 0: ceil(d_model / 16), the paper's default
    summary: ClassVar[str] = "Mamba selective state-space blocks (mambapy; mamba-ssm CUDA kernels when installed)"
    pe_note: ClassVar[str] = "a state-space model has no positional encoding: `pe` must be `none`"

    def check(self):
        for key in ("d_state", "expand", "d_conv"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.arch.{key} must be >= 1, got {getattr(self, key)}")
        if self.dt_rank < 0:
            raise ConfigError(f"model.arch.dt_rank must be >= 0 (0: auto), got {self.dt_rank}")

    def check_model(self, ctx, pe_cfg):
        if pe_cfg.name != "none":
            raise ConfigError(f"model.arch.name=mamba takes no positional encoding (its recurrence orders the "
                              f"tokens); set pe.name=none, not `{pe_cfg.name}`")
