"""Tokenizers: a registry of small classes, each building a `tiktoken.Encoding` that has `<|bos|>`.

    bytes                         256 byte tokens + <|bos|> = 257; built in, needs no file
    gpt2, cl100k_base, o200k_base tiktoken's named encodings with <|bos|> appended after their last id
                                  (tiktoken downloads these once and caches them; offline: a clear error)
    bpe                           trained on the corpus by bpe_train.py, stored by rankfile.py
                                  (rank file + JSON sidecar, never pickle)

`Tokenizer.fingerprint` (sha256 hex of pattern, ranks and special tokens) identifies what the tokens
mean; shard headers carry it so a loader never mixes shards of different tokenizers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import tiktoken

from posbench.config_loader import Checked, from_dict, to_dict
from posbench.data import rankfile
from posbench.errors import ConfigError, DataError
from posbench.registry import Registry

BOS = "<|bos|>"
# GPT-4's split pattern (cl100k_base): contractions, letters, 1-3 digit groups, punctuation, whitespace.
GPT4_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|"""
                r"""\s*[\r\n]|\s+(?!\S)|\s+""")


@dataclass
class TokenizerConfig(Checked):
    """Base of every tokenizer kind's `Config`; `name` selects the registered kind."""

    default_name: ClassVar[str] = "bpe"  # used when a mapping overrides fields but gives no `name`
    name: str = "bpe"

    def check(self) -> None:
        """Validate this kind's own fields; raise ConfigError with what to change."""

    def tag(self) -> str:
        """Folder name for this tokenizer's shards (vocab size included where it varies)."""
        return self.name

    @classmethod
    def registry_lookup(cls, name: str, where: str = "data.tokenizer") -> type[TokenizerConfig]:
        return get_tokenizer_kind(name, where).Config


class Tokenizer:
    """A tiktoken Encoding plus what the data stage needs: bos id, fingerprint, document encoding."""

    def __init__(self, name: str, encoding: tiktoken.Encoding):
        if BOS not in encoding._special_tokens:
            raise DataError(f"tokenizer {name} has no {BOS} special token")
        self.name = name
        self.encoding = encoding
        self.bos_id = encoding._special_tokens[BOS]
        self.vocab_size = encoding.n_vocab
        # tiktoken documents these attributes as the way to extend an encoding (README, "Extending").
        self.fingerprint = rankfile.fingerprint(encoding._pat_str, encoding._mergeable_ranks,
                                                encoding._special_tokens)
        self._bos_arr = np.array([self.bos_id], dtype=np.uint32)

    def encode(self, text: str) -> list[int]:
        """Ordinary text encoding: a literal "<|bos|>" in the text is text, not the special token."""
        return self.encoding.encode_ordinary(text)

    def decode(self, ids) -> str:
        return self.encoding.decode(list(map(int, ids)))

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        """<|bos|> doc0 <|bos|> doc1 ... as one uint32 array (no Python int lists: ~20% faster)."""
        parts = []
        for text in texts:
            parts.append(self._bos_arr)
            try:
                parts.append(self.encoding.encode_to_numpy(text, disallowed_special=()))
            except UnicodeEncodeError:  # lone surrogates (from JSON escapes): same fix as encode_ordinary
                text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
                parts.append(self.encoding.encode_to_numpy(text, disallowed_special=()))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)


class TokenizerKind:
    """One registered way to obtain a tokenizer. `folder` is where a trained one lives."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    Config: ClassVar[type[TokenizerConfig]] = TokenizerConfig
    needs_training: ClassVar[bool] = False
    # every token is one byte, whatever the text: each single-character task symbol is then exactly one token, so
    # a task's per-symbol position ids can be written beside them (data/token_positions.py); a BPE merges digits
    # ("12", " 8") and cannot carry them
    one_token_per_byte: ClassVar[bool] = False

    def __init__(self, cfg: TokenizerConfig, folder: str | Path):
        self.cfg = cfg
        self.folder = Path(folder)

    def build(self) -> Tokenizer:
        raise NotImplementedError

    def is_ready(self) -> bool:
        return True

    def spec(self) -> dict:
        """JSON-able recipe to rebuild this tokenizer in a worker process (no pickled objects)."""
        return {"config": to_dict(self.cfg), "folder": str(self.folder)}


TOKENIZERS = Registry("tokenizer")


def get_tokenizer_kind(name: str, where: str = "data.tokenizer.name") -> type[TokenizerKind]:
    return TOKENIZERS.get(name, where)


def tokenizer_kind(cfg: TokenizerConfig, folder: str | Path) -> TokenizerKind:
    return get_tokenizer_kind(cfg.name)(cfg, folder)


def build_tokenizer(cfg: TokenizerConfig, folder: str | Path) -> Tokenizer:
    return tokenizer_kind(cfg, folder).build()


def tokenizer_from_spec(spec: dict) -> Tokenizer:
    return build_tokenizer(from_dict(TokenizerConfig, spec["config"], "tokenizer"), spec["folder"])


@TOKENIZERS.register("bytes")
class ByteTokenizer(TokenizerKind):
    summary = "256 byte tokens + <|bos|>; no file, no training"
    one_token_per_byte = True

    def build(self) -> Tokenizer:
        ranks = {bytes([b]): b for b in range(256)}
        return Tokenizer("bytes", tiktoken.Encoding("posbench-bytes", pat_str=GPT4_PATTERN,
                                                    mergeable_ranks=ranks, special_tokens={BOS: 256}))


class NamedTiktoken(TokenizerKind):
    """A tiktoken built-in encoding with <|bos|> appended as the next id."""

    def build(self) -> Tokenizer:
        try:
            base = tiktoken.get_encoding(self.name)
        except Exception as e:  # tiktoken raises requests/URL errors of several kinds when offline
            raise DataError(f"could not load tiktoken encoding `{self.name}` ({type(e).__name__}: {e}). "
                            "tiktoken downloads it on first use and caches it in $TIKTOKEN_CACHE_DIR: run "
                            "once with network access, or use data.tokenizer.name=bytes or bpe") from None
        specials = {**base._special_tokens, BOS: base.n_vocab}
        enc = tiktoken.Encoding(f"{self.name}+bos", pat_str=base._pat_str,
                                mergeable_ranks=base._mergeable_ranks, special_tokens=specials)
        return Tokenizer(self.name, enc)


@TOKENIZERS.register("gpt2")
class GPT2(NamedTiktoken):
    summary = "GPT-2's 50257-token BPE + <|bos|>"


@TOKENIZERS.register("cl100k_base")
class CL100k(NamedTiktoken):
    summary = "GPT-4's cl100k_base + <|bos|> (uint32 shards)"


@TOKENIZERS.register("o200k_base")
class O200k(NamedTiktoken):
    summary = "GPT-4o's o200k_base + <|bos|> (uint32 shards)"


@TOKENIZERS.register("bpe")
class TrainedBPE(TokenizerKind):
    summary = "byte-level BPE trained on the train split (rustbpe), saved as a tiktoken rank file"
    needs_training = True

    @dataclass
    class Config(TokenizerConfig):
        vocab_size: int = 65536  # including the <|bos|> special token
        pattern: str = GPT4_PATTERN
        max_chars: int = 2_000_000_000  # characters of training text read from the train split
        doc_cap: int = 10_000  # characters kept per document, so long documents do not dominate
        path: str = ""  # folder of a trained tokenizer; "" = data/tokenizers/<source>/bpe<vocab>

        def check(self) -> None:
            if not 257 <= self.vocab_size < 2**31:
                raise ConfigError(f"data.tokenizer.vocab_size={self.vocab_size}: needs >= 257 (256 bytes + "
                                  "<|bos|>); 65536 keeps shards at uint16, larger switches them to uint32")
            if self.max_chars <= 0 or self.doc_cap <= 0:
                raise ConfigError("data.tokenizer.max_chars and data.tokenizer.doc_cap must be > 0")
            try:  # compile with tiktoken's own regex engine, which differs from Python's `re`
                tiktoken.Encoding("check", pat_str=self.pattern, special_tokens={},
                                  mergeable_ranks={bytes([b]): b for b in range(256)})
            except ValueError as e:
                raise ConfigError(f"data.tokenizer.pattern does not compile: {e}") from None

        def tag(self) -> str:
            return f"bpe{self.vocab_size}"

    def __init__(self, cfg: Config, folder: str | Path):
        super().__init__(cfg, Path(cfg.path) if cfg.path else folder)

    def is_ready(self) -> bool:
        return (self.folder / rankfile.SIDECAR_NAME).is_file()

    def build(self) -> Tokenizer:
        sidecar, ranks = rankfile.load(self.folder)
        if sidecar.get("vocab_size") != self.cfg.vocab_size or sidecar["pattern"] != self.cfg.pattern:
            raise DataError(f"{self.folder}: holds a BPE with vocab {sidecar.get('vocab_size')} and pattern "
                            f"{sidecar['pattern'][:30]!r}..., but the config asks for vocab "
                            f"{self.cfg.vocab_size} and pattern {self.cfg.pattern[:30]!r}...; set "
                            "data.tokenizer.path to another folder, or delete this one to retrain")
        enc = tiktoken.Encoding(sidecar["name"], pat_str=sidecar["pattern"], mergeable_ranks=ranks,
                                special_tokens=sidecar["special_tokens"])
        return Tokenizer("bpe", enc)
