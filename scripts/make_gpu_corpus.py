#!/usr/bin/env python
r"""Real English text for a GPU machine without network: Debian's documentation packages as prose documents,
tokenized ahead by posbench's own data stage into one folder (<= 55 MiB) that travels alone.

    apt-get update && apt-get install -y python3.11-doc linux-doc postgresql-doc perl-doc \
        python-django-doc git-doc debian-handbook debian-reference-en        # as root; ~44 MB of prose
    python scripts/make_gpu_corpus.py          # -> data/gpu_corpus/ (carry it), data/gpu_corpus_text/ (the jsonl)
    posbench train configs/data/gpu_corpus.yaml --model-size tiny --pe-type rope

Reads the packages' reStructuredText, POD, plain-text and HTML pages (gzipped or not), keeps the prose
paragraphs, cuts each file into documents of about --doc-chars characters and splits the documents, in a
fixed shuffle, into validation (part_000.jsonl), filler (part_001) and training (part_002..) text. Then the
data stage trains a BPE of --vocab-size on the training text and writes uint16 token shards of all three
splits under --out, the data root of configs/data/gpu_corpus.yaml, which it writes too (--config). How text
is extracted: src/posbench/data/prose.py; why documents are pieces of files: src/posbench/data/doc_corpus.py.

Rerunning with the same packages gives byte-identical shards and skips the tokenizer and the shards already
built; --force rebuilds everything. Without any of the packages it exits 2 naming the apt-get command; a
folder over --max-mib exits 2 naming --max-mb, the cap on text to lower. --source DIR (repeatable) reads
those folders instead of the packages (every .rst/.txt/.pod/.html file, .gz too).
"""

from __future__ import annotations

import argparse

from posbench.cli.arg_types import positive_float, positive_int
from posbench.cli.errors_cli import cli_entry
from posbench.data.doc_corpus import build


def print_summary(s: dict) -> None:
    print(f"text: {s['mb']:.1f} MB of prose")
    for name, mb in sorted(s["mb_by_source"].items(), key=lambda kv: -kv[1]):
        print(f"  {name:<22} {mb:6.1f} MB")
    print(f"{'split':<8} {'documents':>10} {'tokens':>12}")
    for split in ("val", "filler", "train"):
        print(f"{split:<8} {s['documents'][split]:>10,} {s['tokens'][split]:>12,}")
    print(f"(train: {s['task_tokens']:,} of its tokens are the task mix's documents, data.mix)")
    print(f"folder: {s['folder_mib']:.1f} MiB (tokenizer {s['tokenizer']}, shards {s['tokens_dir']})")
    print(f"done in {s['seconds']:.1f}s")


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="data/gpu_corpus", help="the data root to build and carry (default: %(default)s)")
    p.add_argument("--text-out", default="data/gpu_corpus_text",
                   help="where the jsonl text goes; nothing at training or eval time reads it (default: %(default)s)")
    p.add_argument("--config", default="configs/data/gpu_corpus.yaml",
                   help="the data config written for train.py (default: %(default)s)")
    p.add_argument("--vocab-size", type=positive_int, default=65536,
                   help="BPE vocabulary with <|bos|> (default: %(default)s)")
    p.add_argument("--max-mb", type=positive_float, default=80.0, help="cap on text in MB, taken in the shuffled order "
                   "(default: %(default)s, more than the packages hold)")
    p.add_argument("--max-mib", type=positive_float, default=55.0,
                   help="largest allowed --out folder (default: %(default)s)")
    p.add_argument("--doc-chars", type=positive_int, default=8000,
                   help="document size in characters (default: %(default)s)")
    p.add_argument("--source", action="append", metavar="DIR", help="read this folder instead of the packages")
    p.add_argument("--workers", type=positive_int, help="tokenizer processes (default: one per core)")
    p.add_argument("--force", action="store_true", help="rebuild the text, tokenizer and shards")
    a = p.parse_args(argv)
    summary = build(a.source, a.out, a.text_out, a.vocab_size, a.max_mb, config_path=a.config,
                    doc_chars=a.doc_chars, max_mib=a.max_mib, workers=a.workers, force=a.force)
    print_summary(summary)
    print(f"data config: {a.config}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
