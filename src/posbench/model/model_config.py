"""`model.*`: the transformer's dimensions and options, declared beside the model that reads them.

Lives in `model/` (not in the top-level `posbench.config`) so that building a model needs nothing from
the data or training stages: `model/` and `pe/` import only each other, `config_loader` and `registry`
(tests/repo/test_import_direction.py reads the imports and enforces it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from posbench.config_loader import Checked
from posbench.errors import ConfigError
from posbench.identity_fields import left_out, own_entry
from posbench.model.arch import ArchConfig, DecoderArch
from posbench.model.attention_gate import GATES
from posbench.model.attention_temperature import NoTemperature, TemperatureConfig
from posbench.model.embedding import EMBED_SCALES
from posbench.model.kernels_config import KernelsConfig
from posbench.model.matmul import AUTO, MATMULS
from posbench.model.packing import PackingConfig
from posbench.pe import PEContext
from posbench.pe.window import MAX_WINDOW, check_window

AttentionChoice = Literal["auto", "sdpa", "flex", "flash_alibi", "eager", "sdpa_bias", "sdpa_dense"]
AttentionGate = Literal[tuple(GATES)]  # none | elementwise | headwise (model/attention_gate.py)
EmbedScale = Literal[tuple(EMBED_SCALES)]  # the names are written once, in model/embedding.py
MatmulChoice = Literal[(*MATMULS, AUTO)]  # torch | onednn | auto (model/matmul.py)


def per_layer(value) -> str:
    """A per-layer option (one value, or a list cycling over the layers) as run names spell it: 512, 8-8-full."""
    return "-".join("full" if x is None else str(x) for x in (value if isinstance(value, list) else [value]))


@dataclass
class ModelConfig(Checked):
    size: str = "custom"  # preset label, used in run names
    d_model: int = 512
    n_layers: int = 6
    n_heads: int = 8
    d_ff: int = 2048  # SwiGLU hidden width
    seq_len: int = 1024  # training context length
    vocab_size: int = 65536
    tie_embeddings: bool = True
    dropout: float = 0.0  # embeddings and residual branches
    attn_dropout: float = 0.0
    qk_norm: bool = True
    # false: no learned scale, x / rms(x) (Llama 4's L2Norm)
    qk_norm_weight: bool = field(default=True, metadata=own_entry(lambda v: "_qknorm-unit", place=7))
    # which layers normalise q and k: all, or positional (not those whose PE is position-free: Llama 4's NoPE layers)
    qk_norm_layers: Literal["all", "positional"] = field(default="all",
                                                         metadata=own_entry(lambda v: f"_qknorm-{v}", place=8))
    norm_eps: float = 1e-6
    init_std: float = 0.02
    attention: AttentionChoice = "auto"
    # the linear layers' fp32 CPU products: torch's BLAS, oneDNN (2x faster on AVX-512 AMD; rounding differs), or
    # auto: the faster of the two at this model's shapes, measured at the start and recorded (model/matmul_choice.py);
    # no part of a run's identity (identity_fields.py)
    matmul: MatmulChoice = field(default="torch", metadata=left_out("the library of the same products: checkpoints are "
                                                                   "interchangeable and a resume may switch it"))
    # training's implementations of the loss, the norms and the MLP: torch (posbench's own) or a library's fused
    # kernel (model/kernels_config.py); like matmul, no part of a run's identity, and evaluation builds torch's
    kernels: KernelsConfig = field(default_factory=KernelsConfig, metadata=left_out("implementations, as matmul"))
    embed_scale: EmbedScale = "none"  # sqrt_d: tokens x sqrt(d_model) as Vaswani et al. (model/embedding.py)
    arch: ArchConfig = field(default_factory=DecoderArch)  # decoder | encoder_decoder | mamba (model/arch.py)
    # what a position means in a packed window: mask causal|document, positions window|document (model/packing.py)
    # (its own identity entry only when a switch is on: bos_id alone changes nothing)
    packing: PackingConfig = field(default_factory=PackingConfig, metadata=own_entry(
        lambda p: ("_docmask" if p.mask == "document" else "") + ("_docpos" if p.positions == "document" else ""),
        is_set=lambda p: not p.is_default, place=1))
    # sliding-window attention: None (full), W for every layer, or a per-layer list cycling over the layers
    # ([512, 512, 512, null]: three windowed layers, then a full one); query i sees keys i-W+1 .. i (model/masks.py)
    attention_window: int | list[int | None] | None = field(default=None, metadata=own_entry(
        lambda w: f"_win{per_layer(w)}", place=2))
    # chunked local attention (Llama 4): None, C for every layer, or a per-layer list cycling over the layers
    # ([8192, 8192, 8192, null]: three chunked layers, then a full one); query i sees keys j <= i with
    # j // C == i // C, i and j counted from the start of the window (model/masks.py); beside attention_window
    attention_chunk: int | list[int | None] | None = field(default=None, metadata=own_entry(
        lambda c: f"_chunk{per_layer(c)}", place=6))
    # a sigmoid gate on each head's attention output (Qiu et al. 2025; Qwen3-Next): none | elementwise | headwise
    attention_gate: AttentionGate = field(default="none", metadata=own_entry(lambda v: f"_gate-{v}", place=3))
    # a learned per-head sink logit in every softmax, a virtual key of value 0 (gpt-oss; model/attention_sinks.py)
    attention_sinks: bool = field(default=False, metadata=own_entry(lambda v: "_sinks", place=4))
    # logits times a factor growing with the query's position: none | log_n | ssmax | llama4
    # (model/attention_temperature.py)
    attention_temperature: TemperatureConfig = field(default_factory=NoTemperature.Config,
                                                     metadata=own_entry(lambda t: f"_temp-{t.name}", place=5))
    head_dim: int = field(init=False, default=0)  # derived

    def check(self) -> None:
        for name in ("d_model", "n_layers", "n_heads", "d_ff", "seq_len", "vocab_size"):
            value = getattr(self, name)
            if value <= 0:
                raise ConfigError(f"model.{name} must be a positive integer, got {value}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.d_model={self.d_model} is not divisible by model.n_heads="
                              f"{self.n_heads}; pick heads that divide it (e.g. {self.d_model // 64 or 1})")
        for name in ("dropout", "attn_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"model.{name} must be in [0, 1), got {getattr(self, name)}")
        if not (self.init_std > 0 and self.norm_eps > 0):
            raise ConfigError("model.init_std and model.norm_eps must be > 0")
        self.head_dim = self.d_model // self.n_heads
        if self.packing.bos_id is not None and self.packing.bos_id >= self.vocab_size:
            raise ConfigError(f"model.packing.bos_id={self.packing.bos_id} is not a token of the model's vocabulary "
                              f"(model.vocab_size={self.vocab_size}); leave it unset (the data's <|bos|> is filled in) "
                              "or give an id below the vocabulary size")
        if not self.packing.is_default and type(self.arch) is not DecoderArch:
            raise ConfigError(f"model.packing (mask={self.packing.mask}, positions={self.packing.positions}) is "
                              f"implemented for the decoder only; model.arch={self.arch.name} needs "
                              "model.packing.mask=causal and model.packing.positions=window")
        self._check_window()
        self._check_chunk()
        on = {"attention_gate": self.attention_gate != "none", "attention_sinks": self.attention_sinks,
              "attention_chunk": self.attention_chunk is not None, "qk_norm_weight": not self.qk_norm_weight,
              "qk_norm_layers": self.qk_norm_layers != "all",
              "attention_temperature": self.attention_temperature.name != "none",
              "kernels": not self.kernels.is_default}
        refused = [option for option, is_on in on.items() if is_on and type(self.arch) is not DecoderArch]
        if refused:
            raise ConfigError(f"model.{refused[0]} is implemented for the decoder only; model.arch={self.arch.name} "
                              "needs it off (the default)")

    def _check_window(self) -> None:
        w = self.attention_window
        entries = w if isinstance(w, list) else [w]
        if not entries:
            raise ConfigError("model.attention_window=[] lists no layer; give null (full attention), one window for "
                              "every layer, or one entry per layer of the cycle (e.g. [512, 512, 512, null])")
        if len(entries) > self.n_layers:
            raise ConfigError(f"model.attention_window lists {len(entries)} layers but the model has "
                              f"{self.n_layers} (model.n_layers); give at most one entry per layer")
        for x in entries:
            check_window(x, "model.attention_window")  # 1 .. 2**24 keys, or null
        if w is not None and type(self.arch) is not DecoderArch:
            raise ConfigError(f"model.attention_window is implemented for the decoder only; model.arch="
                              f"{self.arch.name} needs model.attention_window=null")

    def _check_chunk(self) -> None:
        c = self.attention_chunk
        entries = c if isinstance(c, list) else [c]
        if not entries or len(entries) > self.n_layers:
            raise ConfigError(f"model.attention_chunk={c} must list 1 .. model.n_layers={self.n_layers} entries (a "
                              "chunk of keys, or null for a layer without chunks)")
        for x in entries:
            if x is not None and not (isinstance(x, int) and x >= 1):
                raise ConfigError(f"model.attention_chunk entries must be positive integers or null, got {x}")
            if x is not None and x > MAX_WINDOW:  # one chunk covers every length: full attention, a chunked name
                raise ConfigError(f"model.attention_chunk={x} is longer than any sequence a model here can run (2**24 "
                                  f"= {MAX_WINDOW:,} tokens: float32 positions), so no query would ever reach a "
                                  "second chunk; give null for a layer without chunks, or a chunk up to 2**24")

    def layer_chunk(self, layer: int) -> int | None:
        """Layer `layer`'s chunk of keys from model.attention_chunk (None: no chunks)."""
        c = self.attention_chunk
        return c[layer % len(c)] if isinstance(c, list) else c

    def layer_window(self, layer: int) -> int | None:
        """Layer `layer`'s sliding window from model.attention_window (None: full attention)."""
        w = self.attention_window
        return w[layer % len(w)] if isinstance(w, list) else w

    def pe_context(self) -> PEContext:
        return PEContext(self.d_model, self.n_heads, self.n_layers, self.seq_len, self.init_std)
