#!/usr/bin/env python
"""Data-stage benchmark, offline, on synthetic text it generates itself.

1. Tokenization: our pipeline (parquet files -> worker processes -> headered token shards on disk)
   against raw `tiktoken` `encode_ordinary_batch` on the same documents, already in memory, with as
   many threads as we use worker processes. Target: pipeline >= 0.9x raw tiktoken.
2. Loader: batches/s of 64 x 1024 windows (tiny's batch shape) from memory-mapped shards in the
   page cache (200 MB), in the shuffled global order with per-batch token-id checks.
   Target: >= 500 batches/s, 50x the ~10 batches/s one H100 consumes training tiny.

    python scripts/bench_data.py                      # all cores, 64 MB of text, BPE vocab 8192
    python scripts/bench_data.py --cores 8 --mb 200 --tokenizer bytes

Each throughput is the best of --repeats runs (the machine's other load only ever slows a run down).
The pipeline's time includes starting its worker processes. posbench is imported inside functions on
purpose: spawned workers re-import the main module, and with torch at the top (posbench.config
imports the model code) each worker would pay ~1.5 s of imports, which `prepare_fineweb` (a light
main module) never does.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from posbench.cli.arg_types import positive_float, positive_int
from posbench.cli.errors_cli import cli_entry
from posbench.errors import ConfigError


def synthetic_docs(n_chars: int, seed: int = 0) -> list[str]:
    """English-like text: Zipf-distributed pseudo-words, sentences, paragraphs, digits, some unicode."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    freq = 1.0 / np.arange(1, 27) ** 0.9
    words = ["".join(rng.choice(letters, rng.integers(1, 11), p=freq / freq.sum())) for _ in range(30000)]
    words += ["café", "naïve", "Zürich", "东京", "ε-δ", "—", "1984", "3.14"]
    p = 1.0 / np.arange(1, len(words) + 1) ** 1.1
    p /= p.sum()
    docs, total = [], 0
    while total < n_chars:
        n_words = int(rng.lognormal(6.2, 0.8)) + 20  # ~500 words median, like web documents
        w = rng.choice(len(words), n_words, p=p)
        sentences = np.split(w, np.cumsum(rng.integers(6, 25, n_words // 6 + 1)))
        text = ". ".join(" ".join(words[i] for i in s).capitalize() for s in sentences if len(s)) + "."
        text = text.replace(". ", ".\n\n", int(rng.integers(0, 6)))
        docs.append(text)
        total += len(text)
    return docs


def write_parquet_corpus(docs: list[str], folder: Path, n_files: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    for i, part in enumerate(np.array_split(np.arange(len(docs)), n_files)):
        table = pa.table({"text": [docs[j] for j in part]})
        pq.write_table(table, folder / f"part_{i:03d}.parquet", row_group_size=1024)


def bench_tokenize(args, work: Path) -> dict:
    from posbench.config import load_config
    from posbench.data.layout import DataLayout
    from posbench.data.readers import reader_for
    from posbench.data.tokenize_shards import ensure_tokenizer, tokenize

    docs = synthetic_docs(int(args.mb * 1e6))
    n_files = max(4 * args.cores, 8)
    if len(docs) < n_files:  # an empty parquet file has a null-typed column: a reader's error about our own file
        raise ConfigError(f"--mb {args.mb:g} makes {len(docs)} documents, fewer than the {n_files} files the corpus "
                          "is split into (4 per core, at least 8); give a larger --mb")
    corpus = work / "corpus"
    write_parquet_corpus(docs, corpus, n_files=n_files)
    base = [f"data.source={{name: local, paths: ['{corpus}/*.parquet'], tag: bench}}",
            f"data.tokenizer.name={args.tokenizer}", "data.splits.val={start: 0, stop: 1}",
            "data.splits.filler={start: 1, stop: 1}", "data.splits.train={start: 1, stop: null}"]
    if args.tokenizer == "bpe":
        base += [f"data.tokenizer.vocab_size={args.vocab}", "data.tokenizer.max_chars=5000000"]
    cfg = load_config(overrides=base + [f"data.root={work / 'run0'}"]).data
    tok = ensure_tokenizer(cfg, DataLayout.from_config(cfg), log=lambda *_: None)
    # the same documents, as the pipeline reads them (parquet order), for raw tiktoken
    texts = [t for f in sorted(corpus.glob("*.parquet")) for b in reader_for(f).batches() for t in b]
    raw_best, ours_best, n_tokens = 0.0, 0.0, 0
    for r in range(args.repeats):
        t0 = time.perf_counter()
        out = tok.encoding.encode_ordinary_batch(texts, num_threads=args.cores)
        raw_best = max(raw_best, sum(map(len, out)) / (time.perf_counter() - t0))
        n_tokens = sum(map(len, out))
        del out
        run_cfg = load_config(overrides=base + [f"data.root={work / f'run{r}'}"]).data
        if args.tokenizer == "bpe":  # reuse the trained tokenizer, do not retrain per repeat
            run_cfg.tokenizer.path = str(DataLayout.from_config(cfg).tokenizer.folder)
        report = tokenize(run_cfg, log=lambda *_: None, workers=args.cores)
        assert report.tokens - report.documents == n_tokens, "pipeline and tiktoken disagree on the tokens"
        ours_best = max(ours_best, (report.tokens - report.documents) / report.seconds)
    return {"raw": raw_best, "ours": ours_best, "tokens": n_tokens, "chars": sum(map(len, texts)),
            "docs": len(texts), "vocab": tok.vocab_size}


def bench_loader(args, work: Path) -> float:
    from posbench.data.loader import ShardBatchSource, ShardSet
    from posbench.data.shards import write_shard

    rng = np.random.default_rng(0)
    folder = work / "loader"
    folder.mkdir()
    per = args.loader_tokens // 8
    paths = [folder / f"train_{i:05d}.bin" for i in range(8)]
    for p in paths:
        write_shard(p, rng.integers(0, 65536, per, dtype=np.uint32), 65536, "00" * 32)
    shards = ShardSet(paths, seq_len=1024, fingerprint="00" * 32, check_tokens=True)
    for tokens in shards.tokens:  # steady state: shards in the page cache and mapped (1 read per page)
        int(tokens[::2048].sum())
    best = 0.0
    for _ in range(args.repeats):
        source = ShardBatchSource(shards, shards, seed=0, tokenizer_fingerprint="00" * 32)  # the loop's reader
        for step in range(50):  # warm the page cache and the sampling caches
            source.samples(range(step * 64, step * 64 + 64))
        t0 = time.perf_counter()
        for step in range(50, 50 + args.batches):
            x, y = source.samples(range(step * 64, step * 64 + 64))
        best = max(best, args.batches / (time.perf_counter() - t0))
    assert x.shape == (64, 1024)
    return best


@cli_entry
def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cores", type=positive_int, default=os.cpu_count() or 1)
    p.add_argument("--mb", type=positive_float, default=64.0, help="megabytes (millions of chars) of synthetic text")
    p.add_argument("--tokenizer", default="bpe", choices=["bpe", "bytes"])
    p.add_argument("--vocab", type=positive_int, default=8192, help="BPE vocab (trained on the synthetic text)")
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--batches", type=positive_int, default=2000, help="loader batches timed per repeat")
    p.add_argument("--loader-tokens", type=positive_int, default=100_000_000, help="tokens in the loader's shards")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_data_") as tmp:
        tk = bench_tokenize(args, Path(tmp))
        loader = bench_loader(args, Path(tmp))
    ratio = tk["ours"] / tk["raw"]
    name = f"bpe{tk['vocab']}" if args.tokenizer == "bpe" else "bytes"
    rows = [
        ("corpus", f"{tk['chars'] / 1e6:.1f}M chars, {tk['docs']:,} docs, {tk['tokens'] / 1e6:.2f}M tokens ({name})",
         "", ""),
        (f"raw tiktoken encode_ordinary_batch, {args.cores} threads", f"{tk['raw'] / 1e6:.2f}M tokens/s", "", ""),
        (f"pipeline parquet -> shards, {args.cores} workers", f"{tk['ours'] / 1e6:.2f}M tokens/s", "", ""),
        ("pipeline / raw tiktoken", f"{ratio:.2f}x", ">= 0.90x", "yes" if ratio >= 0.9 else "NO"),
        ("loader 64x1024 (shuffled, id-checked)", f"{loader:,.0f} batches/s", ">= 500",
         "yes" if loader >= 500 else "NO"),
    ]
    widths = [max(len(r[i]) for r in rows + [("measure", "value", "target", "ok")]) for i in range(4)]
    line = "| " + " | ".join(f"{{:<{w}}}" for w in widths) + " |"
    print(line.format("measure", "value", "target", "ok"))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line.format(*r))


if __name__ == "__main__":
    raise SystemExit(main())
