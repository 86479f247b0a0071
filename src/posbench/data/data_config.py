"""The data stage's settings: `data.*` (source, splits, tokenizer, download, tokenize, loader, mix).

Declared beside the data code; imports nothing above the data stage (no model, PE or training code),
so the tokenizer worker processes stay torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from posbench.config_loader import Checked
from posbench.data import hub
from posbench.data.corpus_sources import HubShards, SourceConfig
from posbench.data.readers import MAX_ROW_GROUP_BYTES
from posbench.data.splits import SplitsConfig
from posbench.data.tasks import get_task_class
from posbench.data.tasks.mix import TaskMixConfig
from posbench.data.tasks.task import TaskConfig
from posbench.data.tokenizers import TokenizerConfig, TrainedBPE
from posbench.errors import ConfigError


@dataclass
class DownloadConfig(Checked):
    workers: int = 8  # parallel HTTP downloads
    retries: int = 5  # per file, on dropped connections / timeouts / 429 / 5xx
    backoff_s: float = 1.0  # first retry delay, doubled each retry
    max_backoff_s: float = 60.0
    timeout_s: float = hub.TIMEOUT_S  # per socket operation (connect, one read): bounds a stall, not a transfer
    # a transfer (a file, a listing page) averaging fewer bytes/s than this after slow_grace_s is cut and retried:
    # a per-file deadline of slow_grace_s + size / min_bytes_per_s; 0 = no floor
    min_bytes_per_s: float = hub.MIN_BYTES_PER_S
    slow_grace_s: float = hub.SLOW_GRACE_S
    max_listing_bytes: int = hub.MAX_LISTING_BYTES  # a tree listing's JSON over all pages; more is refused
    max_train_shards: int | None = None  # first N train shards (val + filler always); None = all

    def check(self) -> None:
        if self.workers <= 0 or self.retries < 0 or self.timeout_s <= 0:
            raise ConfigError("data.download needs workers > 0, retries >= 0 and timeout_s > 0")
        if self.min_bytes_per_s < 0 or self.slow_grace_s < 0 or self.max_listing_bytes <= 0:
            raise ConfigError("data.download needs min_bytes_per_s >= 0 (0 = no floor), slow_grace_s >= 0 and "
                              "max_listing_bytes > 0")
        if self.backoff_s < 0 or self.max_backoff_s < self.backoff_s:
            raise ConfigError("data.download needs 0 <= backoff_s <= max_backoff_s")
        if self.max_train_shards is not None and self.max_train_shards <= 0:
            raise ConfigError("data.download.max_train_shards must be > 0 (or null for all)")


@dataclass
class TokenizeConfig(Checked):
    workers: int = 0  # worker processes; 0 = one per CPU core
    batch_rows: int = 1024  # documents per parquet row batch (bounds memory per worker)
    # a longer document is split into pieces of at most this many characters, each its own document (the
    # tokenizer needs ~40 bytes per character of one document); `info` reports how many were split
    max_doc_chars: int = 1_000_000
    max_row_group_bytes: int = MAX_ROW_GROUP_BYTES  # a parquet row group's text, decompressed; more is refused

    def check(self) -> None:
        if self.workers < 0 or self.batch_rows <= 0:
            raise ConfigError("data.tokenize needs workers >= 0 (0 = all cores) and batch_rows > 0")
        if self.max_doc_chars <= 0 or self.max_row_group_bytes <= 0:
            raise ConfigError("data.tokenize needs max_doc_chars > 0 and max_row_group_bytes > 0")


@dataclass
class LoaderConfig(Checked):
    seed: int = 0  # sample order = f(seed, global sample index)
    val_tokens: int = 10_485_760  # size of the fixed validation set (20 x 512Ki tokens)
    # ids < vocab: every shard once before training (a sequential read of the train and val shards) and
    # every batch (about 20us per 64x1024 batch); false skips both, for data verified with `info --verify`
    check_tokens: bool = True

    def check(self) -> None:
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
class DataConfig(Checked):
    root: str = "data"  # downloads, tokenizers and token shards live under here (git-ignored)
    source: SourceConfig = field(default_factory=HubShards.Config)
    splits: SplitsConfig = field(default_factory=SplitsConfig)
    tokenizer: TokenizerConfig = field(default_factory=TrainedBPE.Config)
    download: DownloadConfig = field(default_factory=DownloadConfig)
    tokenize: TokenizeConfig = field(default_factory=TokenizeConfig)
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    mix: TaskMixConfig = field(default_factory=default_mix)  # task documents in the train shards
    # with train.stream=task: the task whose own rows (its symbols as token ids, no tokenizer) train the model, as
    # a study cell trains; its saved config says so, and every reader treats the checkpoint as a task model
    task: TaskConfig | None = None

    def check(self) -> None:
        count = self.source.known_count()
        if count is not None:
            self.splits.check_count(count, f"data.source ({self.source.name}, num_shards={count})")
