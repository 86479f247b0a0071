"""Train the `bpe` tokenizer on text from the train split with rustbpe, save it with rankfile.py.

rustbpe (nanochat's trainer) does the GPT-4-style pre-split and the pair counting in Rust, in
parallel; we feed it a stream of documents, each cut to `doc_cap` characters so a few huge documents
do not dominate the merges, until `max_chars` characters have been read. <|bos|> takes the last id.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from posbench.data import rankfile
from posbench.data.hints import data_command
from posbench.data.tokenizers import BOS, TrainedBPE
from posbench.errors import DataError, user_paths


class _Capped:
    """Iterator over documents, each cut to doc_cap chars, stopping after max_chars in total."""

    def __init__(self, texts: Iterable[str], doc_cap: int, max_chars: int):
        self._texts, self.doc_cap, self.max_chars = iter(texts), doc_cap, max_chars
        self.chars = 0
        self.docs = 0

    def __iter__(self) -> Iterator[str]:
        for text in self._texts:
            if self.chars >= self.max_chars:
                return
            text = text[: self.doc_cap]
            self.chars += len(text)
            self.docs += 1
            yield text


def train_bpe(cfg: TrainedBPE.Config, texts: Iterable[str], folder: str | Path, trained_on: str = "",
              log=print) -> str:
    """Train, save to `folder` atomically (sidecar last), return the fingerprint."""
    try:
        import rustbpe
    except ImportError:
        raise DataError("training a BPE needs the `rustbpe` package: pip install rustbpe") from None
    folder = Path(folder)
    stream = _Capped(texts, cfg.doc_cap, cfg.max_chars)
    n_merged = cfg.vocab_size - 1  # all ids but the special token's
    t0 = time.perf_counter()
    trainer = rustbpe.Tokenizer()
    trainer.train_from_iterator(iter(stream), n_merged, pattern=cfg.pattern)
    ranks = {bytes(tok): rank for tok, rank in trainer.get_mergeable_ranks()}
    if stream.docs == 0:
        raise DataError(f"no training text for the BPE (from {trained_on or 'the train split'}): its train files "
                        "hold no documents; put text in them (or, for a hub source, run "
                        f"`{data_command('download')}`)")
    if len(ranks) != n_merged:
        raise DataError(f"the BPE training text ({stream.chars:,} chars from {trained_on}) only supports "
                        f"{len(ranks)} tokens, short of vocab_size-1 = {n_merged}; train on more text "
                        "(more shards, larger data.tokenizer.max_chars) or lower data.tokenizer.vocab_size")
    extra = {"trained_on": {"source": trained_on, "chars": stream.chars, "documents": stream.docs,
                            "doc_cap": cfg.doc_cap, "trainer": "rustbpe"}}
    with user_paths():  # the folder is under the user's data.root
        fp = rankfile.save(folder, f"bpe{cfg.vocab_size}", cfg.pattern, ranks, {BOS: len(ranks)}, extra)
    log(f"trained BPE vocab {cfg.vocab_size} on {stream.chars:,} chars / {stream.docs:,} documents in "
        f"{time.perf_counter() - t0:.1f}s -> {folder}")
    return fp
