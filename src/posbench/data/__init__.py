"""Data stage: download -> tokenizer -> token shards -> loader.

    python -m posbench.data.prepare_fineweb download --max-shards 100
    python -m posbench.data.prepare_fineweb tokenize
    python -m posbench.data.prepare_fineweb info

One job per file:
    corpus_sources.py, splits.py     where input files come from (hub shards, hub folder, local globs), split ranges
    hub.py, download.py        the hub's HTTP layout; parallel, retried, verified downloads + manifest.py
    readers.py                 documents out of parquet / jsonl / txt, in bounded batches
    tokenizers.py              bytes / named tiktoken / trained BPE (bpe_train.py, rankfile.py: no pickle)
    shards.py                  the on-disk token format (256 x int32 header, uint16/uint32 tokens, int32 position ids
                               in version 2)
    tokenize_shards.py         worker processes writing shards, deterministic and resumable
    sampling.py, loader.py     the global sample order and what training reads
    layout.py, info.py         paths, `info`
    hints.py                   the commands a missing-data error names, spelled with the user's own data config
    prose.py                   the prose paragraphs of documentation files (rst/txt/pod/html, gzipped or not)
    doc_corpus.py              those paragraphs as numbered jsonl documents, split, tokenized into one data root
                               (scripts/make_gpu_corpus.py)
    errors.py                  DataError, ShardError, DownloadError (defined in posbench/errors.py, exit code 2)
    prepare_fineweb.py         a shim: the command is `posbench data` (posbench/cli/data.py)

Atomic writes and the directory lock are posbench/fileio.py's (shared by every stage).

Kept import-light on purpose: data/data_config.py imports the config classes from here, and tokenizer worker
processes import only what they use (no torch). `tokenize_shards.py` is not named after the standard library's
`tokenize` module, so that it can never shadow it.
"""
