"""Documents out of input files, in bounded batches: a registry of readers keyed by file suffix.

    .parquet   `text_field` column, streamed as row batches of `batch_rows` (pyarrow reads one row group
               at a time, so memory is bounded by the row group, whatever the file size)
    .jsonl     one JSON object per line, document = obj[text_field]
    .txt       the whole file is one document (refused above TXT_MAX_BYTES: split it or use jsonl)
    .md .rst   plain text, as .txt (READMEs, docs sources: real prose that needs no download)

Null and empty documents are skipped. `check()` validates a file cheaply (schema, first record)
before any worker starts, so a bad file fails the run up front with its name in the message. Input files are
the user's (their corpus, downloads under their data.root, --ppl-text): the OS refusing one is bad input.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from posbench.data.errors import DataError
from posbench.errors import user_paths
from posbench.registry import Registry

TXT_MAX_BYTES = 256 << 20


class DocumentReader:
    suffix: ClassVar[str] = ""

    def __init__(self, path: str | Path, text_field: str = "text", batch_rows: int = 1024):
        self.path = Path(path)
        self.text_field = text_field
        self.batch_rows = batch_rows

    def check(self) -> None:
        """Raise DataError if the file cannot be read as documents."""

    def batches(self) -> Iterator[list[str]]:
        raise NotImplementedError


# file suffix -> reader; the registered name is the class's `suffix`
READERS = Registry("document reader", attr="suffix")


def supported_suffixes() -> list[str]:
    return READERS.names()


def reader_for(path: str | Path, text_field: str = "text", batch_rows: int = 1024) -> DocumentReader:
    path = Path(path)
    if path.suffix.lower() not in READERS:
        raise DataError(f"{path}: cannot read `{path.suffix}` files; supported: "
                        f"{', '.join(supported_suffixes())}")
    return READERS[path.suffix.lower()](path, text_field, batch_rows)


@READERS.register(".parquet")
class ParquetReader(DocumentReader):
    def _open(self):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(self.path)
        except (pa.ArrowException, OSError) as e:
            raise DataError(f"{self.path}: not a readable parquet file ({e}); delete it and re-download "
                            "or fix the input") from None
        names = pf.schema_arrow.names
        if self.text_field not in names:
            raise DataError(f"{self.path}: no column `{self.text_field}` (columns: {', '.join(names)}); "
                            "set data.source.text_field to the text column")
        tp = pf.schema_arrow.field(self.text_field).type
        if not (pa.types.is_string(tp) or pa.types.is_large_string(tp)):
            raise DataError(f"{self.path}: column `{self.text_field}` has type {tp}, expected a string column")
        return pf

    def check(self) -> None:
        self._open()

    def batches(self) -> Iterator[list[str]]:
        pf = self._open()
        for batch in pf.iter_batches(batch_size=self.batch_rows, columns=[self.text_field]):
            yield [t for t in batch.column(0).to_pylist() if t]


@READERS.register(".jsonl")
class JsonlReader(DocumentReader):
    def _text(self, line: bytes, lineno: int) -> str | None:
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{self.path}:{lineno}: not valid JSON ({e})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get(self.text_field, 0), (str, type(None))):
            raise DataError(f"{self.path}:{lineno}: expected an object with a string `{self.text_field}` "
                            "field; set data.source.text_field to the right key")
        return obj.get(self.text_field)

    def check(self) -> None:
        with user_paths(), self.path.open("rb") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    self._text(line, lineno)
                    return

    def batches(self) -> Iterator[list[str]]:
        batch: list[str] = []
        with user_paths(), self.path.open("rb") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                text = self._text(line, lineno)
                if text:
                    batch.append(text)
                if len(batch) >= self.batch_rows:
                    yield batch
                    batch = []
        if batch:
            yield batch


@READERS.register(".txt")
class TextReader(DocumentReader):
    def check(self) -> None:
        with user_paths():
            size = self.path.stat().st_size
        if size > TXT_MAX_BYTES:
            raise DataError(f"{self.path}: {size:,} bytes; a .txt file is one document and is read whole, so "
                            f"files over {TXT_MAX_BYTES >> 20} MiB are refused: split it into several files, "
                            "or convert it to .jsonl with one document per line")

    def batches(self) -> Iterator[list[str]]:
        self.check()
        with user_paths():
            text = self.path.read_text(encoding="utf-8", errors="replace")
        if text:
            yield [text]


@READERS.register(".md")
class MarkdownReader(TextReader):
    """Read as plain text."""


@READERS.register(".rst")
class RestructuredTextReader(TextReader):
    """Read as plain text."""
