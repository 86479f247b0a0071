"""A corpus of English prose from documentation files, cut into documents, split, tokenized by the data stage.

Text, per file: data/prose.py (`file_prose`: markup dropped, only paragraphs that read as prose). Folders named
`translations` are skipped (the kernel's Italian, Spanish, Chinese, ... copies).

Documents: a file's prose paragraphs joined into pieces of about `doc_chars` characters (`merge_paragraphs`:
a piece ends at the first paragraph that reaches the size), so one long reference page is several documents
and a short page one. Why pieces of a file, not whole files or single paragraphs: a piece of the default
8,000 characters is ~1,600 tokens of contiguous text (5 characters a token), enough to fill a training window
of 1,024 tokens with one topic, yet no single page (Python's changelog, the kernel's memory-barriers.txt) can
make up most of the validation split; and at this size the BPE trainer, which reads the first
`data.tokenizer.doc_cap` = 10,000 characters of each document, sees almost all of the text. Exact duplicates
are dropped.

Splits: documents ordered by sha256(seed, text), a fixed shuffle that mixes the sources, that no library
version changes, and that depends on nothing but the text. `max_mb` keeps the first documents of that order;
the first `val_share` of the kept text is validation, the next `filler_share` filler (the eval's haystacks),
the rest training. They go to numbered jsonl files (`{"text": ...}` a line) for the data stage's `local`
source: part_000 = val, part_001 = filler, part_002.. = train (round-robin, about TRAIN_FILE_BYTES each, so
the data stage tokenizes them in parallel). A document is in exactly one file, so in one split; two pieces
of one long page can be in different splits (different text on one topic).

`build` then runs the data stage in-process on a data config rendered by `config_yaml` (the same text is the
YAML a training run loads, so both name the same shard folder): a `bpe` tokenizer trained on the train split,
uint16 token shards of every split with their manifest, all under `out` (the data root). A rerun with the
same text skips what is done (the jsonl files are rewritten only when their bytes change, so the data stage
sees its inputs unchanged); a stamp (`corpus.json`) of the text's sha256 and the vocabulary makes a rerun on
changed text retrain the tokenizer instead of tokenizing new text with an old one.
"""

from __future__ import annotations

import glob
import hashlib
import json
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from posbench.config_loader import from_dict
from posbench.data.data_config import DataConfig
from posbench.data.layout import DataLayout
from posbench.data.manifest import Manifest
from posbench.data.prose import HTML_SUFFIXES, TEXT_SUFFIXES, file_prose, merge_paragraphs
from posbench.errors import ConfigError, DataError, user_paths
from posbench.fileio import atomic_open, read_json, remove_tree, write_json, write_text
from posbench.yaml_io import parse_yaml

SKIP_FOLDERS = frozenset({"translations"})
TRAIN_FILE_BYTES = 4 << 20  # text per train jsonl file (~1M tokens: one tokenizer worker's task)
MB = 1_000_000
STAMP = "corpus.json"


@dataclass(frozen=True)
class DocSource:
    """Where one package's documentation lies: a folder (a glob: a version in its name) and file patterns."""

    name: str
    folder: str
    patterns: tuple[str, ...] = tuple(f"**/*{s}{gz}" for s in TEXT_SUFFIXES + HTML_SUFFIXES for gz in ("", ".gz"))

    def files(self) -> list[Path]:
        found = {p for folder in glob.glob(self.folder) for pattern in self.patterns for p in Path(folder).glob(pattern)
                 if p.is_file() and not SKIP_FOLDERS & set(p.relative_to(folder).parts)}
        return sorted(found)


# Debian bookworm's documentation packages with the most English prose (~44 MB of it together). One format
# per package, so no text is read twice (linux-doc's html/_sources repeat its Documentation/, git-doc's
# HTML pages its .txt sources, debian-reference's chapters its .txt.gz).
DEBIAN_SOURCES = (
    DocSource("python3.11-doc", "/usr/share/doc/python3.11/html/_sources", ("**/*.txt",)),
    DocSource("linux-doc", "/usr/share/doc/linux-doc-*/Documentation", ("**/*.rst.gz", "**/*.txt.gz")),
    DocSource("postgresql-doc", "/usr/share/doc/postgresql-doc-*/html", ("*.html",)),
    DocSource("perl-doc", "/usr/share/perl/5.*/pod", ("*.pod",)),
    DocSource("python-django-doc", "/usr/share/doc/python-django-doc/html", ("**/*.html",)),
    DocSource("git-doc", "/usr/share/doc/git-doc", ("**/*.txt",)),
    DocSource("debian-handbook", "/usr/share/doc/debian-handbook/html/en-US", ("*.html",)),
    DocSource("debian-reference-en", "/usr/share/debian-reference", ("*.en.txt.gz",)),
)
APT_INSTALL = "apt-get update && apt-get install -y " + " ".join(s.name for s in DEBIAN_SOURCES)


# ---- documents and splits ----

@dataclass(frozen=True)
class Document:
    source: str  # the DocSource's name
    text: str


def documents(sources: Iterable[DocSource], doc_chars: int) -> list[Document]:
    """Every source's files' prose in pieces of about `doc_chars` characters, exact duplicates dropped."""
    seen: set[str] = set()
    out = []
    for source in sources:
        for path in source.files():
            for text in merge_paragraphs(file_prose(path), doc_chars):
                if text not in seen:
                    seen.add(text)
                    out.append(Document(source.name, text))
    return out


def _order_key(seed: int, text: str) -> bytes:
    return hashlib.sha256(f"{seed}\0{text}".encode()).digest()


def split_documents(docs: list[Document], max_mb: float, val_share: float, filler_share: float,
                    seed: int = 0) -> dict[str, list[Document]]:
    """{"val", "filler", "train"}: the documents in the fixed shuffle, cut at `max_mb` MB of UTF-8 text, then
    the first `val_share` of it validation, the next `filler_share` filler (each at least one document)."""
    order = sorted(docs, key=lambda d: _order_key(seed, d.text))
    kept, size = [], 0
    for doc in order:
        if size >= max_mb * MB:
            break
        kept.append(doc)
        size += len(doc.text.encode())
    splits: dict[str, list[Document]] = {"val": [], "filler": [], "train": []}
    target = {"val": round(val_share * size)}  # whole bytes: no float rounding decides a document's split
    target["filler"] = target["val"] + round(filler_share * size)
    done = 0
    for doc in kept:
        name = next((s for s in ("val", "filler") if done < target[s] or not splits[s]), "train")
        splits[name].append(doc)
        done += len(doc.text.encode())
    return splits


def _jsonl(docs: Iterable[Document]) -> bytes:
    return "".join(json.dumps({"text": d.text}, ensure_ascii=False) + "\n" for d in docs).encode()


def write_parts(splits: dict[str, list[Document]], folder: Path) -> list[Path]:
    """part_000.jsonl (val), part_001 (filler), part_002.. (train, round-robin); a file whose bytes would not
    change is left untouched (its mtime is the data stage's sign that it is done), other part files removed."""
    train = splits["train"]
    n_train = max(1, math.ceil(sum(len(d.text.encode()) for d in train) / TRAIN_FILE_BYTES))
    contents = [_jsonl(splits["val"]), _jsonl(splits["filler"]), *(_jsonl(train[i::n_train]) for i in range(n_train))]
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"part_{i:03d}.jsonl" for i in range(len(contents))]
    for path, data in zip(paths, contents, strict=True):
        if not path.is_file() or path.read_bytes() != data:
            with atomic_open(path) as f:
                f.write(data)
    for stale in set(folder.glob("part_*.jsonl")) - set(paths):
        stale.unlink()
    return paths


# ---- the data config and the build ----

def config_yaml(out: str | Path, text_out: str | Path, vocab_size: int, tag: str = "debian_docs") -> str:
    """The data config that tokenizes and trains on the corpus: what `build` runs and what train.py loads."""
    return f"""\
# English prose from Debian's documentation packages, tokenized ahead so a machine without network trains on it:
#   python scripts/make_gpu_corpus.py          # builds the data root below (carry that folder alone)
#   posbench train configs/data/gpu_corpus.yaml --model-size tiny --pe-type rope
# Everything training and eval.py read is under data.root: the BPE (tokenizers/{tag}/bpe{vocab_size}/) and the
# token shards of the val, filler and train splits with their manifest (tokens/{tag}/). The jsonl text
# under data.source.paths is only read to build them. model.vocab_size is the tokenizer's, so any
# --model-size trains on it. data.mix is the default task mix (the train shards hold it): changing it names
# another shard folder, built with `posbench data tokenize` and this file (it needs the jsonl text).
data:
  root: {json.dumps(str(out))}
  source:
    name: local
    paths: [{json.dumps(str(Path(text_out) / 'part_*.jsonl'))}]
    tag: {tag}
  splits:
    val: {{start: 0, stop: 1}}
    filler: {{start: 1, stop: 2}}
    train: {{start: 2, stop: null}}
  tokenizer:
    name: bpe
    vocab_size: {vocab_size}
model:
  vocab_size: {vocab_size}
"""


def data_config(yaml_text: str) -> DataConfig:
    return from_dict(DataConfig, parse_yaml(yaml_text)["data"], "data")


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _owned(cfg: DataConfig) -> list[Path]:
    """What a build writes under its data root: its tokenizers' and its token shards' folders, the stamp."""
    layout = DataLayout.from_config(cfg)
    return [layout.tokenizer.folder.parent, layout.tokens_dir.parent, Path(cfg.root) / STAMP]


def _clear(paths: Iterable[Path]) -> None:
    for path in paths:
        if path.is_dir():
            remove_tree(path)
        else:
            path.unlink(missing_ok=True)


def build(source_dirs: Iterable[str | Path] | None = None, out: str | Path = "data/gpu_corpus",
          text_out: str | Path = "data/gpu_corpus_text", vocab_size: int = 65536, max_mb: float = 80.0, *,
          config_path: str | Path | None = None, doc_chars: int = 8000, val_share: float = 0.04,
          filler_share: float = 0.04, seed: int = 0, max_mib: float = 55.0, workers: int | None = None,
          force: bool = False, log=print) -> dict:
    """Build the corpus (module doc) from `source_dirs` (folders searched for every supported suffix; None: the
    Debian packages of DEBIAN_SOURCES), write the data config to `config_path` (None: not written; the summary
    holds it), return a summary. `workers`: tokenizer processes (None: one per core; 1: in this process)."""
    t0 = time.perf_counter()
    if max_mb <= 0 or doc_chars <= 0 or max_mib <= 0 or not (0 < val_share and 0 < filler_share
                                                             and val_share + filler_share < 1):
        raise ConfigError(f"corpus: need max_mb > 0 (got {max_mb:g}), doc_chars > 0 (got {doc_chars}), max_mib > 0 "
                          f"(got {max_mib:g}) and val_share, filler_share > 0 summing below 1 (got {val_share:g}, "
                          f"{filler_share:g})")
    sources = DEBIAN_SOURCES if source_dirs is None else [DocSource(Path(d).name, str(d)) for d in source_dirs]
    found = [s for s in sources if s.files()]
    if not found:
        raise DataError(f"no documentation text (.rst .txt .pod .html, maybe gzipped) under "
                        f"{', '.join(s.folder for s in sources)}; install Debian's documentation packages "
                        f"(as root): {APT_INSTALL}")
    missing = [s.name for s in sources if s not in found]
    if missing:
        log(f"note: no text from {', '.join(missing)} (not installed?): {APT_INSTALL}")
    splits = split_documents(documents(found, doc_chars), max_mb, val_share, filler_share, seed)
    if not splits["train"] or not splits["filler"]:
        raise DataError(f"only {sum(map(len, splits.values()))} documents of text: too few for validation, filler "
                        "and training; give more text (another --source) or a larger --max-mb")
    yaml_text = config_yaml(out, text_out, vocab_size)
    cfg = data_config(yaml_text)
    with user_paths():  # the folders and the config file are the caller's
        if force:
            _clear([*_owned(cfg), *Path(text_out).glob("part_*.jsonl")])
        parts = write_parts(splits, Path(text_out))
        stamp = {"text": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in parts},
                 "vocab_size": vocab_size}
        stamp_path = Path(out) / STAMP
        if read_json(stamp_path, default=None) != stamp:  # other text: the tokenizer and shards are built anew
            _clear(_owned(cfg))
            write_json(stamp_path, stamp)
        if config_path is not None:
            write_text(config_path, yaml_text)
    from posbench.data.tokenize_shards import tokenize  # the data stage's worker machinery: only when building

    tokenize(cfg, log=log, workers=workers)
    layout = DataLayout.from_config(cfg)
    summary = _summary(splits, layout, Path(out), yaml_text, time.perf_counter() - t0)
    if summary["folder_mib"] > max_mib:
        raise DataError(f"{out} holds {summary['folder_mib']:.1f} MiB, over the {max_mib:g} MiB limit: lower "
                        f"--max-mb (max_mb, now {max_mb:g} MB of text) and rebuild")
    return summary


def _summary(splits: dict[str, list[Document]], layout: DataLayout, out: Path, yaml_text: str,
             seconds: float) -> dict:
    by_source: dict[str, float] = {}
    for docs in splits.values():
        for d in docs:
            by_source[d.source] = by_source.get(d.source, 0.0) + len(d.text.encode()) / MB
    tokens = {s: 0 for s in splits}
    task_tokens = 0  # of the train split's: the task mix's documents (data.mix), the rest is the corpus
    for entry in Manifest(layout.tokens_manifest, "tokens").files.values():
        tokens[entry["split"]] += entry["tokens"]
        task_tokens += sum(c["tokens"] for kind, c in entry.get("mix", {}).items() if kind != "corpus")
    return {"mb_by_source": by_source, "mb": sum(by_source.values()),
            "documents": {s: len(d) for s, d in splits.items()}, "tokens": tokens, "task_tokens": task_tokens,
            "folder_mib": folder_bytes(out) / 2**20, "tokenizer": str(layout.tokenizer.folder),
            "tokens_dir": str(layout.tokens_dir), "config": yaml_text, "seconds": seconds}
