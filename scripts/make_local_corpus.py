#!/usr/bin/env python
"""A few MB of real English text as a local corpus, without network: the reStructuredText sources of
Python's documentation (Debian/Ubuntu: `apt-get install python3.11-doc`), split into paragraph documents.

    python scripts/make_local_corpus.py                       # -> data/corpus/pydocs/part_00..15.jsonl
    python scripts/make_local_corpus.py --source DIR --out data/corpus/mine --files 32

Documents are paragraphs merged up to ~--doc-chars characters (prose-sized documents, so a task mix's
share of documents is also a meaningful share of tokens). Files are numbered in a fixed order, so with the
local source's split ranges file 0 is validation, file 1 filler and the rest training. Without the docs
package, it writes generated English-like sentences instead (the project's filler generator) and says so.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from pathlib import Path

import numpy as np

from posbench.cli.arg_types import positive_float, positive_int
from posbench.cli.errors_cli import cli_entry
from posbench.data.prose import merge_paragraphs, paragraphs

DEFAULT_SOURCE = "/usr/share/doc/python3.11/html/_sources"


def documents(source: Path, doc_chars: int):
    files = sorted(glob.glob(str(source / "**" / "*.txt"), recursive=True))
    paras = (p for f in files for p in paragraphs(Path(f).read_text(encoding="utf-8", errors="replace")))
    yield from merge_paragraphs(paras, doc_chars)


def generated_documents(n_docs: int, doc_chars: int):
    from posbench.data.tasks.filler import GeneratedFiller

    filler, rng = GeneratedFiller(), np.random.default_rng(0)
    for _ in range(n_docs):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < doc_chars:
            words += filler.words(rng, 32)
        yield " ".join(words)


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", default=DEFAULT_SOURCE, help="folder of .txt/.rst.txt sources (searched recursively)")
    p.add_argument("--out", default="data/corpus/pydocs", help="output folder for part_XX.jsonl")
    p.add_argument("--files", type=positive_int, default=16,
                   help="number of jsonl files (file 0 val, 1 filler, 2.. train)")
    p.add_argument("--doc-chars", type=positive_int, default=600, help="merge paragraphs up to this many characters")
    p.add_argument("--max-mb", type=positive_float, default=12.0, help="stop after this much text")
    args = p.parse_args(argv)
    source, out = Path(args.source), Path(args.out)
    if args.files < 3:
        print("error: --files must be >= 3 (val, filler and at least one train file)", file=sys.stderr)
        return 2
    if source.is_dir() and glob.glob(str(source / "**" / "*.txt"), recursive=True):
        docs, what = documents(source, args.doc_chars), f"paragraphs of {source}"
    else:
        docs = generated_documents(int(args.max_mb * 2**20 / args.doc_chars), args.doc_chars)
        what = f"GENERATED sentences ({source} not found: apt-get install python3.11-doc for real text)"
    out.mkdir(parents=True, exist_ok=True)
    tmp = [out / f".part_{i:02d}.jsonl.tmp" for i in range(args.files)]
    handles = [open(t, "w", encoding="utf-8") for t in tmp]
    n = size = 0
    try:
        for n, doc in enumerate(docs, 1):
            handles[(n - 1) % args.files].write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
            size += len(doc.encode())
            if size >= args.max_mb * 2**20:
                break
    finally:
        for h in handles:
            h.close()
    for i, t in enumerate(tmp):
        os.replace(t, out / f"part_{i:02d}.jsonl")
    print(f"wrote {n:,} documents ({size / 2**20:.1f} MB) of {what} to {out}/part_00..{args.files - 1:02d}.jsonl")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
