"""Token shard files: a fixed header of 256 little-endian int32, then the tokens.

    int32[0]      MAGIC  = 0x42534F50 ("POSB" read as bytes)
    int32[1]      VERSION = 1
    int32[2]      dtype code = bytes per token: 2 (uint16) when vocab <= 65536, else 4 (uint32)
    int32[3:5]    token count, int64 as (low, high) 32-bit halves
    int32[5]      vocab size (every token id is < this)
    int32[6:10]   tokenizer fingerprint: first 16 bytes of the tokenizer's sha256 (see tokenizers.py)
    int32[10:12]  document count (number of <|bos|> tokens), int64 as (low, high)
    int32[12]     contents: bit 0 (HAS_POSITIONS) = a position id per token follows the tokens (version 2)
    int32[13:256] zero, reserved
    then          count tokens of the dtype above, little-endian; file size = 1024 + count * dtype bytes
    then          (version 2 only) count position ids, int32 little-endian: the per-token ids the data defines
                  (a task document's digit places, 0 on text: data/token_positions.py);
                  file size = 1024 + count * (dtype bytes + 4)

A shard without position ids is version 1 (contents 0), the format text-only shards have always had, so every
version-1 shard loads and a text-only shard's bytes do not depend on whether the writer knows about ids; a shard
with them is version 2, which a version-1 reader refuses by its version instead of misreading it.

Readers check every field against the file before handing out tokens, and name the file in every
error, because a bad shard found mid-training is far more expensive than one found at open time.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from posbench.errors import ShardError
from posbench.fileio import atomic_open

MAGIC = 0x42534F50
VERSION = 1  # tokens only
VERSION_POSITIONS = 2  # tokens, then a position id per token
HAS_POSITIONS = 1  # bit of the contents field
POSITION_DTYPE = np.dtype("<i4")
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
FINGERPRINT_BYTES = 16
UINT16_MAX_VOCAB = 1 << 16
_FIX = "re-run `python -m posbench.data.prepare_fineweb tokenize` to rebuild it"
CONTENT_SAMPLE_BYTES = 64 << 10  # bytes read from each end of a shard for its content fingerprint


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= UINT16_MAX_VOCAB else np.dtype("<u4")


def fingerprint_prefix(fingerprint: str) -> bytes:
    """The 16 bytes of a hex sha256 fingerprint that a shard header stores."""
    return bytes.fromhex(fingerprint)[:FINGERPRINT_BYTES]


@dataclass(frozen=True)
class ShardHeader:
    n_tokens: int
    vocab_size: int
    fingerprint16: bytes
    n_docs: int = 0
    itemsize: int = 0  # 0 = derived from vocab_size
    positions: bool = False  # a position id per token follows the tokens

    @property
    def version(self) -> int:
        return VERSION_POSITIONS if self.positions else VERSION

    @property
    def dtype(self) -> np.dtype:
        return dtype_for_vocab(self.vocab_size)

    @property
    def file_size(self) -> int:
        per_token = (self.itemsize or self.dtype.itemsize) + (POSITION_DTYPE.itemsize if self.positions else 0)
        return HEADER_BYTES + self.n_tokens * per_token

    def pack(self) -> bytes:
        h = np.zeros(HEADER_INTS, dtype="<i4")
        h[0], h[1], h[2] = MAGIC, self.version, self.itemsize or self.dtype.itemsize
        h[3], h[4] = _split64(self.n_tokens)
        h[5] = self.vocab_size
        h[6:10] = np.frombuffer(self.fingerprint16.ljust(FINGERPRINT_BYTES, b"\0"), dtype="<i4")
        h[10], h[11] = _split64(self.n_docs)
        h[12] = HAS_POSITIONS if self.positions else 0
        return h.tobytes()


def _split64(value: int) -> tuple[int, int]:
    lo, hi = value & 0xFFFFFFFF, value >> 32
    return np.int32(np.uint32(lo).view(np.int32)), hi  # store the low half's bits unchanged


def _join64(lo: np.int32, hi: np.int32) -> int:
    return int(np.int32(lo).view(np.uint32)) | (int(hi) << 32)


def read_header(path: str | Path) -> ShardHeader:
    """Parse and validate the header and the file size; raise ShardError naming `path`."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            raw = f.read(HEADER_BYTES)
    except FileNotFoundError:
        raise ShardError(f"{path}: token shard does not exist; {_FIX}") from None
    if len(raw) < HEADER_BYTES:
        raise ShardError(f"{path}: truncated: {size} bytes is shorter than the {HEADER_BYTES}-byte header; "
                         f"{_FIX}")
    h = np.frombuffer(raw, dtype="<i4")
    if int(h[0]) != MAGIC:
        raise ShardError(f"{path}: not a posbench token shard (magic {int(h[0]):#x}, expected {MAGIC:#x}); "
                         "check the path, or " + _FIX)
    if int(h[1]) not in (VERSION, VERSION_POSITIONS):
        raise ShardError(f"{path}: shard format version {int(h[1])}, this code reads versions {VERSION} and "
                         f"{VERSION_POSITIONS}; " + _FIX)
    contents = int(h[12])
    want = HAS_POSITIONS if int(h[1]) == VERSION_POSITIONS else 0
    if contents != want:
        raise ShardError(f"{path}: version {int(h[1])} header with contents field {contents} (expected {want}); "
                         f"the header is corrupt, {_FIX}")
    header = ShardHeader(n_tokens=_join64(h[3], h[4]), vocab_size=int(h[5]), fingerprint16=h[6:10].tobytes(),
                         n_docs=_join64(h[10], h[11]), itemsize=int(h[2]), positions=bool(contents & HAS_POSITIONS))
    if header.vocab_size <= 0:
        raise ShardError(f"{path}: invalid vocab size {header.vocab_size} in header; {_FIX}")
    if header.itemsize != header.dtype.itemsize:
        raise ShardError(f"{path}: dtype code {header.itemsize} does not match vocab size {header.vocab_size}"
                         f" (expected {header.dtype.itemsize}: uint16 up to 65536 tokens, else uint32); {_FIX}")
    expected = header.file_size
    if size != expected:
        what = " with position ids" if header.positions else ""
        raise ShardError(f"{path}: header says {header.n_tokens} tokens{what} ({expected} bytes) but the file has "
                         f"{size} bytes (truncated or appended to); {_FIX}")
    return header


def open_shard(path: str | Path, fingerprint: str | None = None, check_tokens: bool = True
               ) -> tuple[ShardHeader, np.ndarray]:
    """Validate a shard and memory-map its tokens (read-only)."""
    path = Path(path)
    header = read_header(path)
    if fingerprint is not None and header.fingerprint16 != fingerprint_prefix(fingerprint):
        raise ShardError(f"{path}: written by a different tokenizer (fingerprint {header.fingerprint16.hex()}"
                         f", this tokenizer's is {fingerprint_prefix(fingerprint).hex()}); re-tokenize with "
                         "the tokenizer you train with, or point data.tokenizer at the one that wrote it")
    if header.n_tokens == 0:
        return header, np.zeros(0, dtype=header.dtype)
    tokens = np.memmap(path, dtype=header.dtype, mode="r", offset=HEADER_BYTES, shape=(header.n_tokens,))
    if check_tokens:
        check_token_range(tokens, header.vocab_size, path)
    return header, tokens


def open_positions(path: str | Path, header: ShardHeader) -> np.ndarray | None:
    """The shard's position ids, memory-mapped read-only (int32, one per token), or None when it holds none
    (every version 1 shard)."""
    if not header.positions:
        return None
    if header.n_tokens == 0:
        return np.zeros(0, dtype=POSITION_DTYPE)
    positions = np.memmap(path, dtype=POSITION_DTYPE, mode="r",
                          offset=HEADER_BYTES + header.n_tokens * header.itemsize, shape=(header.n_tokens,))
    # checked when opened, as token ids are: a negative id deep in a shard would otherwise train until a batch
    # reaches it, then fail on every resume (or, for a PE that clamps, train on it silently)
    if int(positions.min()) < 0:
        bad = int(np.argmax(positions < 0))
        raise ShardError(f"{path}: position id {int(positions[bad])} at token {bad} is negative (the writer stores "
                         f"ids >= 0); the file is corrupt, {_FIX}")
    return positions


def content_fingerprint(path: str | Path) -> str:
    """A cheap fingerprint of a shard's bytes: sha256 of its size, its first and its last 64 KiB (the header and the
    first tokens; the last tokens or position ids), 32 hex digits. Names and token counts alone let a shard rebuilt
    from other text (or edited) with the same count pass for the old one; hashing whole shards would read every
    byte of the data at each start, so a change confined to the middle of a large shard is not seen."""
    path = Path(path)
    digest = hashlib.sha256()
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        digest.update(f"{size}\n".encode())
        digest.update(f.read(CONTENT_SAMPLE_BYTES))
        f.seek(max(CONTENT_SAMPLE_BYTES, size - CONTENT_SAMPLE_BYTES))
        digest.update(f.read(CONTENT_SAMPLE_BYTES))
    return digest.hexdigest()[:32]


def check_token_range(tokens: np.ndarray, vocab_size: int, path: str | Path) -> None:
    if tokens.size and int(tokens.max()) >= vocab_size:
        bad = int(np.argmax(tokens >= vocab_size))
        raise ShardError(f"{path}: token id {int(tokens[bad])} at position {bad} is >= the vocab size "
                         f"{vocab_size} in its header; the file is corrupt, {_FIX}")


class ShardWriter:
    """Stream tokens into a shard atomically: header placeholder, tokens, then the real header.

    Memory stays bounded by what the caller passes to `write`; the file appears only when complete.
    With `positions`, every `write` also gives the tokens' position ids; they are spooled to a temporary file
    beside the shard and appended after the tokens when it closes (a version 2 shard).
    """

    def __init__(self, path: str | Path, vocab_size: int, fingerprint: str, positions: bool = False):
        self.path = Path(path)
        self.vocab_size = vocab_size
        self.fingerprint16 = fingerprint_prefix(fingerprint)
        self.dtype = dtype_for_vocab(vocab_size)
        self.positions = positions
        self.n_tokens = 0
        self.n_docs = 0
        self._ctx = None
        self._f = None
        self._pos = None

    def __enter__(self) -> ShardWriter:
        self._ctx = atomic_open(self.path, "wb")
        self._f = self._ctx.__enter__()
        self._f.write(b"\0" * HEADER_BYTES)
        if self.positions:
            self._pos = tempfile.TemporaryFile(dir=self.path.parent, prefix=f".{self.path.name}.positions.")
        return self

    def write(self, tokens: np.ndarray, n_docs: int = 0, positions: np.ndarray | None = None) -> None:
        if tokens.size and int(tokens.max()) >= self.vocab_size:
            raise ShardError(f"{self.path}: refusing to write token id {int(tokens.max())} >= vocab size "
                             f"{self.vocab_size}; the tokenizer and the vocab size disagree")
        if (positions is not None) != self.positions:
            raise ValueError(f"{self.path}: a writer {'with' if self.positions else 'without'} position ids was "
                             f"given {'none' if positions is None else 'some'}")
        if positions is not None:
            if positions.shape != tokens.shape or (positions.size and int(positions.min()) < 0):
                raise ShardError(f"{self.path}: position ids must be >= 0, one per token ({positions.shape} for "
                                 f"{tokens.shape} tokens)")
            self._pos.write(np.ascontiguousarray(positions, dtype=POSITION_DTYPE).tobytes())
        self._f.write(np.ascontiguousarray(tokens, dtype=self.dtype).tobytes())
        self.n_tokens += int(tokens.size)
        self.n_docs += n_docs

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                if self._pos is not None:
                    self._pos.seek(0)
                    shutil.copyfileobj(self._pos, self._f)
                header = ShardHeader(self.n_tokens, self.vocab_size, self.fingerprint16, self.n_docs,
                                     positions=self.positions)
                self._f.flush()
                self._f.seek(0, os.SEEK_SET)
                self._f.write(header.pack())
        finally:
            if self._pos is not None:
                self._pos.close()
        return self._ctx.__exit__(exc_type, exc, tb)


def write_shard(path: str | Path, tokens: np.ndarray, vocab_size: int, fingerprint: str, n_docs: int = 0,
                positions: np.ndarray | None = None) -> ShardHeader:
    with ShardWriter(path, vocab_size, fingerprint, positions=positions is not None) as w:
        w.write(np.asarray(tokens), n_docs, None if positions is None else np.asarray(positions))
    return read_header(path)
