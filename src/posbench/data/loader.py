"""What training reads: memory-mapped token shards cut into windows, in a resumable global order.

Shape legend: B per-rank batch, G global batch (B * world), T seq_len.

    window w of shard s = tokens[k*T : k*T + T + 1] of that shard, k = 0 .. (n_s - 1) // T - 1
                          (stride T, so every token is a target exactly once; windows never cross shards)
    global batch t      = global samples t*G .. t*G + G - 1, each mapped to a window by sampling.py
    rank r of world w   = reads only samples t*G + r*B .. t*G + r*B + B - 1 of each global batch
    x_BT, y_BT          = window[:, :-1], window[:, 1:]  (int64); shards that carry position ids (version 2,
                          data/shards.py) give the inputs' ids too (`targets.Rows.positions`)

The order is a pure function of (seed, global sample index), so the concatenation of every rank's
batches equals the single-process batch, and the step is the whole data cursor: resuming at step s reads
the same batches, even with a different world size (training/batch_sources.py addresses the rows). The
validation set is fixed: the first `val_tokens // T` windows of the val shards, in order, split by rank
(training/batch_sources.py `val_indices`).

`ShardBatchSource` is the training loop's BatchSource over a train and a val ShardSet.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np
import torch

from posbench.data.hints import data_command, prepare_hint
from posbench.data.layout import DataLayout
from posbench.data.manifest import Manifest
from posbench.data.sampling import window_ids
from posbench.data.shards import (
    VERSION,
    VERSION_POSITIONS,
    content_fingerprint,
    open_positions,
    open_shard,
    read_header,
)
from posbench.errors import DataError, ShardError
from posbench.targets import Rows

ID_CHECK_CHUNK = 1 << 26  # tokens per step of the start-up id check: bounded memory at any shard size


class ShardSet:
    """Validated, memory-mapped shards seen as one array of windows of T + 1 tokens."""

    def __init__(self, paths: list[str | Path], seq_len: int, fingerprint: str | None = None,
                 check_tokens: bool = True):
        if not paths:
            raise DataError(f"no token shards given; run `{data_command('tokenize')}`")
        self.paths = [Path(p) for p in paths]
        self.seq_len = seq_len
        self.check_tokens = check_tokens
        opened = [open_shard(p, fingerprint, check_tokens=False) for p in self.paths]
        vocabs = {h.vocab_size for h, _ in opened}
        if len(vocabs) != 1 or len({h.fingerprint16 for h, _ in opened}) != 1:
            raise ShardError(f"shards in {self.paths[0].parent} come from different tokenizers (vocab sizes "
                             f"{sorted(vocabs)}); re-tokenize them all with one tokenizer")
        self.vocab_size = vocabs.pop()
        # plain ndarray views of the memmaps: slicing a np.memmap subclass is several times slower
        self.tokens = [t.view(np.ndarray) for _, t in opened]
        # the data's own position ids (version 2 shards), windowed like the tokens; None: the shards hold none
        carry = {h.positions for h, _ in opened}
        if len(carry) != 1:
            with_ids = [p.name for p, (h, _) in zip(self.paths, opened, strict=True) if h.positions]
            raise ShardError(f"shards in {self.paths[0].parent} disagree: {len(with_ids)} of {len(opened)} carry "
                             f"position ids (e.g. {with_ids[0]}); re-tokenize them all the same way")
        self.positions = None
        if carry.pop():
            self.positions = [open_positions(p, h).view(np.ndarray) for p, (h, _) in zip(self.paths, opened,
                                                                                          strict=True)]
        counts = [max(0, (len(t) - 1) // seq_len) for t in self.tokens]
        self.cum = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.n_windows = int(self.cum[-1])
        self.n_tokens = sum(len(t) for t in self.tokens)
        if self.n_windows == 0:
            raise DataError(f"{len(self.paths)} shards in {self.paths[0].parent} hold {self.n_tokens} tokens, "
                            f"not one window of seq_len + 1 = {seq_len + 1}; tokenize more data")
        desc = "\n".join(f"{p.name} {len(t)}" for p, t in zip(self.paths, self.tokens, strict=True))
        self.digest = hashlib.sha256(f"{seq_len}\n{desc}".encode()).hexdigest()[:16]
        if check_tokens:
            self.check_ids()

    @functools.cached_property
    def content(self) -> dict[str, str]:
        """Each shard's content fingerprint by file name (shards.content_fingerprint: its size and both ends)."""
        return {p.name: content_fingerprint(p) for p in self.paths}

    def check_ids(self) -> None:
        """Every id below the vocabulary, before training starts: a header can be intact over a corrupt
        body, and the first bad batch would otherwise stop a run hours in. One sequential pass over the
        memory-mapped shards (page-cache speed: ~10 GB/s; read from disk once otherwise)."""
        for path, tokens in zip(self.paths, self.tokens, strict=True):
            for start in range(0, len(tokens), ID_CHECK_CHUNK):
                chunk = tokens[start:start + ID_CHECK_CHUNK]
                if chunk.size and int(chunk.max()) >= self.vocab_size:
                    at = start + int(np.argmax(chunk >= self.vocab_size))
                    raise ShardError(f"{path}: token id {int(tokens[at])} >= vocab size {self.vocab_size} at "
                                     f"token {at}; the file is corrupt, re-tokenize it (delete it and run "
                                     "`python -m posbench.data.prepare_fineweb tokenize` again)")

    def gather_positions(self, ids: np.ndarray) -> np.ndarray | None:
        """The position ids of windows `ids` (int64, (len(ids), T + 1)), None when the shards hold none."""
        if self.positions is None:
            return None
        shard = np.searchsorted(self.cum, ids, side="right") - 1
        start = (ids - self.cum[shard]) * self.seq_len
        out = np.empty((len(ids), self.seq_len + 1), dtype=np.int64)
        for row, (s, o) in enumerate(zip(shard.tolist(), start.tolist(), strict=True)):
            out[row] = self.positions[s][o:o + self.seq_len + 1]
        return out

    def gather(self, ids: np.ndarray) -> np.ndarray:
        """Windows `ids` as an int64 array (len(ids), T + 1)."""
        shard = np.searchsorted(self.cum, ids, side="right") - 1
        start = (ids - self.cum[shard]) * self.seq_len
        out = np.empty((len(ids), self.seq_len + 1), dtype=np.int64)
        for row, (s, o) in enumerate(zip(shard.tolist(), start.tolist(), strict=True)):
            out[row] = self.tokens[s][o:o + self.seq_len + 1]
        if self.check_tokens and out.size and int(out.max()) >= self.vocab_size:
            row = int(np.argmax(out.max(axis=1) >= self.vocab_size))
            raise ShardError(f"{self.paths[shard[row]]}: token id {int(out[row].max())} >= vocab size "
                             f"{self.vocab_size} near token {start[row]}; the file is corrupt, re-tokenize it")
        return out


def _split_xy(windows: np.ndarray, positions: np.ndarray | None = None) -> Rows:
    """Inputs and targets of windows of T + 1 tokens, with the inputs' position ids when the shards carry them."""
    t = torch.from_numpy(windows)
    pos = None if positions is None else torch.from_numpy(positions[:, :-1].copy())
    return Rows(t[:, :-1].contiguous(), t[:, 1:].contiguous(), pos)


def split_shards(layout: DataLayout, splits, split: str) -> list[Path]:
    """Tokenized shards of `split` per the tokens manifest, restricted to the current ranges."""
    manifest = Manifest(layout.tokens_manifest, "tokens")
    entries = sorted((e["index"], name) for name, e in manifest.files.items()
                     if e["split"] == split and splits.split_of(e["index"]) == split)
    if not entries:
        raise DataError(f"no tokenized `{split}` shards in {layout.tokens_dir}; "
                        f"{prepare_hint(layout.source.downloadable)}")
    paths = [layout.tokens_dir / name for _, name in entries]
    for path in paths:
        check_recorded(path, manifest.files[path.name], manifest.path)
    return paths


def check_recorded(path: Path, entry: dict, manifest: Path) -> None:
    """The shard's header says what the manifest recorded when tokenize wrote it: its format version (an entry has
    `positions: true` exactly when the shard is version 2: every writer of a version 2 shard records it) and its
    token count. A header edited from version 2 to 1 with a token count that keeps the file size consistent passes
    every check of the header alone, and would hand out the position ids as tokens."""
    header = read_header(path)
    version = VERSION_POSITIONS if entry.get("positions") else VERSION
    tokens = entry.get("tokens", header.n_tokens)
    if header.version != version or header.n_tokens != tokens:
        raise ShardError(f"{path}: its header says format version {header.version} with {header.n_tokens:,} tokens, "
                         f"but {manifest} recorded version {version} with {tokens:,} tokens when it was written; the "
                         f"header was changed since: delete the shard and run `{data_command('tokenize')}` to "
                         "rebuild it")


class ShardBatchSource:
    """The training loop's BatchSource (training/batch_sources.py) over token shards: sample index i is
    window `window_ids(i)` of the train shards; validation row i is val window i (fixed, in order)."""

    def __init__(self, train: ShardSet, val: ShardSet, seed: int = 0, val_tokens: int = 10_485_760,
                 tokenizer_fingerprint: str = "", mix_tag: str = "", bos_id: int | None = None):
        self.train, self.val, self.seed = train, val, seed
        self.bos_id = bos_id  # the <|bos|> that starts every document (model.packing splits windows there)
        self.tokenizer_fingerprint = tokenizer_fingerprint  # in every checkpoint's meta, checked by eval.py
        self._n_val = min(val.n_windows, max(1, val_tokens // val.seq_len))
        # names the tokenizer and the task mix, so a resume onto other shards says which differs
        self.fingerprint = (f"shards-{tokenizer_fingerprint[:16]}-{mix_tag or 'nomix'}-{train.digest}-{val.digest}"
                            f"-n{self._n_val}-s{seed}")

    @property
    def content(self) -> dict[str, str]:
        """Shard file name -> content fingerprint, train and val: recorded in every checkpoint's meta.json and
        compared on resume (training/resume.py), since the fingerprint above sees only names and token counts."""
        return {**self.train.content, **self.val.content}

    def samples(self, indices) -> Rows:
        ids = window_ids(np.asarray(indices, dtype=np.int64), self.train.n_windows, self.seed)
        return _split_xy(self.train.gather(ids), self.train.gather_positions(ids))

    def val_samples(self, indices) -> Rows:
        ids = np.asarray(indices, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self._n_val):
            raise IndexError(f"validation rows are 0..{self._n_val - 1}, asked for {ids.min()}..{ids.max()}")
        return _split_xy(self.val.gather(ids), self.val.gather_positions(ids))

    def n_val(self) -> int:
        return self._n_val


def build_batch_source(cfg, seq_len: int) -> ShardBatchSource:
    """A BatchSource for `cfg` (a DataConfig): tokenized train and val shards of its tokenizer."""
    layout = DataLayout.from_config(cfg)
    tokenizer = layout.tokenizer.build()
    fingerprint = tokenizer.fingerprint
    check = cfg.loader.check_tokens
    train = ShardSet(split_shards(layout, cfg.splits, "train"), seq_len, fingerprint, check)
    val = ShardSet(split_shards(layout, cfg.splits, "val"), seq_len, fingerprint, check)
    return ShardBatchSource(train, val, cfg.loader.seed, cfg.loader.val_tokens, fingerprint, layout.mix_tag,
                            tokenizer.bos_id)
