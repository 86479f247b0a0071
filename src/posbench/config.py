"""Typed run configuration: dataclasses, presets, CLI shortcuts and resolve().

    python train.py configs/base.yaml configs/model/tiny.yaml pe.name=alibi model.dropout=0.1
    python train.py --model-size tiny --pe-type alibi          # the same fields, familiar flags

Sources merge left to right: dataclass defaults <- --model-size preset <- YAML files <- --pe-type <-
dotted overrides. The size preset comes first because it also carries per-size lr, batch and warmup
(configs/model/*.yaml): a YAML file that sets optim.lr must win over it. Unknown keys and wrong types
fail before any work, naming the nearest valid key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from posbench.config_loader import ConfigError, dump_yaml, from_dict, load_yaml, merge_sources, nearest
from posbench.data.sources import HubShards, SourceConfig
from posbench.data.splits import SplitsConfig
from posbench.data.tasks import get_task_class
from posbench.data.tasks.mix import TaskMixConfig
from posbench.data.tokenizers import TokenizerConfig, TrainedBPE
from posbench.model.arch import ArchConfig, DecoderArch
from posbench.model.embedding import EMBED_SCALES
from posbench.pe import PES, PEConfig, PEContext
from posbench.pe.rope import RoPE


def _config_dir() -> Path:
    """Presets: shipped inside the wheel as posbench/configs (setup.py), else the checkout's configs/."""
    packaged = Path(__file__).resolve().parent / "configs"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "configs"


CONFIG_DIR = _config_dir()

AttentionChoice = Literal["auto", "sdpa", "flex", "flash_alibi", "eager"]
EmbedScale = Literal[tuple(EMBED_SCALES)]  # the names are written once, in model/embedding.py


@dataclass
class ModelConfig:
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
    norm_eps: float = 1e-6
    init_std: float = 0.02
    attention: AttentionChoice = "auto"
    embed_scale: EmbedScale = "none"  # sqrt_d: tokens x sqrt(d_model) as Vaswani et al. (model/embedding.py)
    arch: ArchConfig = field(default_factory=DecoderArch)  # decoder | encoder_decoder | mamba (model/arch.py)
    head_dim: int = field(init=False, default=0)  # derived

    def __post_init__(self):
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

    def pe_context(self) -> PEContext:
        return PEContext(self.d_model, self.n_heads, self.n_layers, self.seq_len, self.init_std)


@dataclass
class OptimConfig:
    lr: float = 1e-3  # peak learning rate (stable phase)
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1  # matrices only; see training/optim.py

    def __post_init__(self):
        if not self.lr > 0 or not 0 <= self.beta1 < 1 or not 0 <= self.beta2 < 1 or self.weight_decay < 0:
            raise ConfigError("optim: need lr > 0, 0 <= beta1, beta2 < 1, weight_decay >= 0")


DecayShape = Literal["linear", "1-sqrt", "cosine"]


@dataclass
class ScheduleConfig:
    """Warmup-stable-decay (Hu et al. 2024, MiniCPM; Hagele et al. 2024): the LR is a pure function of
    tokens seen and the budget, so resume and branching need no scheduler state."""

    warmup_tokens: int = 0  # 0: warmup_frac of the smallest budget
    warmup_frac: float = 0.02
    decay_frac: float = 0.2  # share of each budget spent decaying
    decay: DecayShape = "1-sqrt"
    min_lr_ratio: float = 0.0

    def __post_init__(self):
        if not (0 <= self.warmup_frac < 1 and 0 < self.decay_frac <= 1 and 0 <= self.min_lr_ratio <= 1):
            raise ConfigError("schedule: need 0 <= warmup_frac < 1, 0 < decay_frac <= 1, 0 <= min_lr_ratio <= 1")
        if self.warmup_tokens < 0:
            raise ConfigError(f"schedule.warmup_tokens must be >= 0, got {self.warmup_tokens}")


@dataclass
class TrainConfig:
    out_dir: str = "checkpoints"
    run_name: str = ""  # "": <size>_<pe>_<budget>_s<seed>
    target_budgets: list[float] = field(default_factory=lambda: [20.0, 40.0])
    budget_unit: Literal["tokens_per_param", "tokens"] = "tokens_per_param"
    global_batch_tokens: int = 524288
    micro_batch: int = 16  # sequences per rank per forward/backward
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: bf16 on CUDA, fp32 on CPU
    compile: bool = False  # torch.compile the model (inductor; every PE compiles with fullgraph=True)
    # LM head + cross-entropy: "chunked" fuses them over chunks of loss_chunk_tokens tokens so the (B, T, V)
    # logits never exist (model/loss.py); "auto" = chunked iff model.vocab_size >= 32768; "full" = plain
    loss: Literal["auto", "chunked", "full"] = "auto"
    loss_chunk_tokens: int = 512
    parallel: Literal["ddp", "fsdp"] = "ddp"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    grad_clip: float = 1.0  # 0 disables clipping (the finite check stays)
    log_interval: int = 10  # steps
    eval_interval: int = 250  # steps; 0 disables validation
    eval_batches: int = 8
    ckpt_interval: int = 500  # steps; 0: only branch, signal and final checkpoints
    keep_last: int = 3
    keep_best: bool = True  # on each validation that improves the loss: a checkpoint and the `best` link
    resume: str = ""  # "", "auto" or a checkpoint path
    allow_resume_mismatch: bool = False
    branch_from: str = ""  # checkpoint saved before a budget's decay
    budget: float = 0.0  # with branch_from: the budget (in budget_unit) whose decay to run
    max_steps: int = 0  # > 0: stop after this many steps (smoke runs); the schedule is unchanged
    # what the loop reads: "shards" (tokenized data under data.root) or "random" tokens (smoke runs,
    # benchmarks; nothing to learn)
    stream: Literal["shards", "random"] = "shards"

    def __post_init__(self):
        if not self.target_budgets or any(b <= 0 for b in self.target_budgets):
            raise ConfigError(f"train.target_budgets must be positive numbers, got {self.target_budgets}")
        positive = ("global_batch_tokens", "micro_batch", "log_interval", "eval_batches", "loss_chunk_tokens")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"train.{name} must be > 0, got {getattr(self, name)}")
        if self.keep_last < 2:
            raise ConfigError(f"train.keep_last must be >= 2 (a corrupt latest checkpoint falls back to the "
                              f"previous one), got {self.keep_last}")
        if self.grad_clip < 0 or self.eval_interval < 0 or self.ckpt_interval < 0 or self.max_steps < 0:
            raise ConfigError("train.grad_clip, eval_interval, ckpt_interval and max_steps must be >= 0")
        if bool(self.branch_from) != bool(self.budget):
            raise ConfigError("train.branch_from and train.budget go together (--branch-from CKPT --budget N)")


@dataclass
class LoggingConfig:
    wandb: Literal["auto", "online", "offline", "disabled"] = "auto"  # auto: online iff WANDB_API_KEY is set
    project: str = "pos-enc-bench"
    entity: str = ""
    group: str = ""


@dataclass
class DownloadConfig:
    workers: int = 8  # parallel HTTP downloads
    retries: int = 5  # per file, on dropped connections / timeouts / 429 / 5xx
    backoff_s: float = 1.0  # first retry delay, doubled each retry
    max_backoff_s: float = 60.0
    timeout_s: float = 60.0  # per socket operation
    max_train_shards: int | None = None  # first N train shards (val + filler always); None = all

    def __post_init__(self):
        if self.workers <= 0 or self.retries < 0 or self.timeout_s <= 0:
            raise ConfigError("data.download needs workers > 0, retries >= 0 and timeout_s > 0")
        if self.backoff_s < 0 or self.max_backoff_s < self.backoff_s:
            raise ConfigError("data.download needs 0 <= backoff_s <= max_backoff_s")
        if self.max_train_shards is not None and self.max_train_shards <= 0:
            raise ConfigError("data.download.max_train_shards must be > 0 (or null for all)")


@dataclass
class TokenizeConfig:
    workers: int = 0  # worker processes; 0 = one per CPU core
    batch_rows: int = 1024  # documents per parquet row batch (bounds memory per worker)

    def __post_init__(self):
        if self.workers < 0 or self.batch_rows <= 0:
            raise ConfigError("data.tokenize needs workers >= 0 (0 = all cores) and batch_rows > 0")


@dataclass
class LoaderConfig:
    seed: int = 0  # sample order = f(seed, global sample index)
    val_tokens: int = 10_485_760  # size of the fixed validation set (20 x 512Ki tokens)
    # ids < vocab: every shard once before training (a sequential read of the train and val shards) and
    # every batch (about 20us per 64x1024 batch); false skips both, for data verified with `info --verify`
    check_tokens: bool = True

    def __post_init__(self):
        if self.val_tokens <= 0:
            raise ConfigError("data.loader.val_tokens must be > 0")


# The default pretraining mix: six short in-context tasks (copying, reversal, sorting, digit-wise addition,
# position-relative lookup and long-range matching) as 10% of the train documents, the reference
# framework's share. Each uses its task's default in- and out-of-distribution ranges, so eval.py's
# algorithmic suite asks the pretrained model exactly the formats (and lengths, for ID) it saw.
DEFAULT_MIX_TASKS = ("simple_copy", "reverse", "sort", "no_carry_add", "k_back", "long_range_match")


def default_mix() -> TaskMixConfig:
    return TaskMixConfig(tasks=[get_task_class(name).Config() for name in DEFAULT_MIX_TASKS])


@dataclass
class DataConfig:
    root: str = "data"  # downloads, tokenizers and token shards live under here (git-ignored)
    source: SourceConfig = field(default_factory=HubShards.Config)
    splits: SplitsConfig = field(default_factory=SplitsConfig)
    tokenizer: TokenizerConfig = field(default_factory=TrainedBPE.Config)
    download: DownloadConfig = field(default_factory=DownloadConfig)
    tokenize: TokenizeConfig = field(default_factory=TokenizeConfig)
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    mix: TaskMixConfig = field(default_factory=default_mix)  # task documents in the train shards

    def __post_init__(self):
        count = self.source.known_count()
        if count is not None:
            self.splits.check_count(count, f"data.source ({self.source.name}, num_shards={count})")


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    pe: PEConfig = field(default_factory=RoPE.Config)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    data: DataConfig = field(default_factory=DataConfig)
    seed: int = 42

    def resolve(self) -> RunConfig:
        """Cross-field checks and derived values, once, before any work is done."""
        PES.get(self.pe.name).validate(self.pe, self.model.pe_context())
        self.model.arch.validate(self.model.pe_context(), self.pe)
        return self

    def to_yaml(self) -> str:
        return dump_yaml(self)


def preset_path(kind: str, name: str) -> Path:
    folder = CONFIG_DIR / kind
    path = folder / f"{name}.yaml"
    if not path.is_file():
        available = sorted(p.stem for p in folder.glob("*.yaml"))
        raise ConfigError(f"no {kind} preset `{name}` in {folder}" + nearest(name, available))
    return path


def load_preset(kind: str, path_or_name: str, cls, where: str):
    """A typed config from a YAML file, or from configs/<kind>/<name>.yaml when given a bare name
    (studies, sweeps): strict, so an unknown key or a mistyped preset name names the nearest valid one."""
    path = Path(path_or_name)
    if not path.suffix:
        path = preset_path(kind, path_or_name)
    return from_dict(cls, load_yaml(path), where)


def load_config(files: list[str | Path] = (), overrides: list[str] = (), model_size: str | None = None,
                pe_type: str | None = None) -> RunConfig:
    """Merge sources, build the typed config strictly, resolve it."""
    files = list(files)
    if model_size:
        files.insert(0, preset_path("model", model_size))
    shortcuts = [f"pe.name={pe_type}"] if pe_type else []
    merged = merge_sources(files, shortcuts + list(overrides))
    return from_dict(RunConfig, merged).resolve()
