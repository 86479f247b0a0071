"""Where the data stage keeps things, all under `data.root` (default `data/`, git-ignored):

    raw/<source>/                      downloaded files + manifest.json (download.py)
    tokenizers/<source>/<tokenizer>/   tokenizer.tiktoken + tokenizer.json (trained BPE only)
    tokens/<source>/<tokenizer>[_<mix>]/  <split>_<index:05d>.bin token shards + manifest.json (tokenize_shards.py)

<source> is the source's tag (e.g. karpathy__fineweb-edu-100b-shuffle), <tokenizer> the tokenizer's
tag (bytes, gpt2, bpe65536, ...), <mix> the task mix's tag (mix-<fingerprint>, data/tasks/mix.py; none
without task documents; mix-<fingerprint>-pos when the shards carry the tasks' position ids,
token_positions.py), so different corpora, tokenizers and mixes never overwrite each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from posbench.data.corpus_sources import Source, build_source
from posbench.data.tasks.mix import TaskMixConfig, mix_tag
from posbench.data.token_positions import writes_positions
from posbench.data.tokenizers import TokenizerKind, tokenizer_kind

TOKENS_MANIFEST = "manifest.json"


@dataclass(frozen=True)
class DataLayout:
    root: Path
    source: Source
    tokenizer: TokenizerKind
    mix: TaskMixConfig

    @classmethod
    def from_config(cls, cfg) -> DataLayout:
        """`cfg` is a DataConfig (data/data_config.py), duck-typed: only its fields are read."""
        root = Path(cfg.root).expanduser()
        source = build_source(cfg.source, root)
        kind = tokenizer_kind(cfg.tokenizer, root / "tokenizers" / source.tag / cfg.tokenizer.tag())
        return cls(root, source, kind, cfg.mix)

    @property
    def raw_dir(self) -> Path:
        return self.source.raw_dir

    @property
    def positions(self) -> bool:
        """Whether the train and val shards carry per-token position ids (data/token_positions.py)."""
        return writes_positions(self.mix, self.tokenizer)

    @property
    def mix_tag(self) -> str:
        return mix_tag(self.mix, self.positions)

    @property
    def tokens_dir(self) -> Path:
        tag = self.tokenizer.cfg.tag() + (f"_{self.mix_tag}" if self.mix_tag else "")
        return self.root / "tokens" / self.source.tag / tag

    @property
    def tokens_manifest(self) -> Path:
        return self.tokens_dir / TOKENS_MANIFEST


def shard_name(split: str, index: int) -> str:
    return f"{split}_{index:05d}.bin"
