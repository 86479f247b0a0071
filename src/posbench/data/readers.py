"""Documents out of input files, in bounded batches: a registry of readers keyed by file suffix.

    .parquet   `text_field` column, streamed as row batches of `batch_rows` (pyarrow reads one row group
               at a time, so memory is bounded by the row group, whatever the file size)
    .jsonl     one JSON object per line, document = obj[text_field] (a line over JSONL_MAX_LINE_BYTES is refused,
               never read whole: a file of one huge line would otherwise be)
    .txt       the whole file is one document (refused above TXT_MAX_BYTES: split it or use jsonl)
    .md .rst   plain text, as .txt (READMEs, docs sources: real prose that needs no download)

Null and empty documents are skipped. `check()` validates a file cheaply (schema, first record)
before any worker starts, so a bad file fails the run up front with its name in the message. Input files are
the user's (their corpus, downloads under their data.root, --ppl-text): the OS refusing one is bad input.

Bounded memory, whatever the file claims (design rule: bounded): a few KB of parquet can decode to gigabytes
(one long value compressed, or one dictionary value repeated in every row), and the tokenizer needs ~40 bytes
per character of one document. So a parquet file whose text column decompresses to more than
`max_row_group_bytes` in any row group is refused by `check()` from its metadata, before anything is read; the
column is read dictionary-encoded (a repeated value stays one value), its lengths are looked at in Arrow
before any Python string is made, batches are cut at BATCH_BYTES of text, and with `max_doc_chars` a longer
document is split into consecutive pieces of at most that many characters (cut at a character boundary
within that many UTF-8 bytes), each its own document; `split_docs` counts the documents split.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from posbench.errors import DataError, user_paths
from posbench.fileio import bounded_lines
from posbench.registry import Registry

TXT_MAX_BYTES = 256 << 20
MAX_ROW_GROUP_BYTES = 256 << 20  # a parquet row group's text column, decompressed (FineWeb: ~5 MB)
BATCH_BYTES = 16 << 20  # text per yielded batch, at most (plus one document)
JSONL_MAX_LINE_BYTES = TXT_MAX_BYTES  # one .jsonl record: a document read whole, as a .txt file is


class DocumentReader:
    suffix: ClassVar[str] = ""

    def __init__(self, path: str | Path, text_field: str = "text", batch_rows: int = 1024,
                 max_doc_chars: int | None = None, max_row_group_bytes: int = MAX_ROW_GROUP_BYTES):
        self.path = Path(path)
        self.text_field = text_field
        self.batch_rows = batch_rows
        self.max_doc_chars = max_doc_chars  # None: documents are never split
        self.max_row_group_bytes = max_row_group_bytes
        self.split_docs = 0  # documents longer than max_doc_chars, split into pieces

    def pieces(self, text: str) -> list[str]:
        """`text` as one document, or in consecutive pieces of at most max_doc_chars characters."""
        cap = self.max_doc_chars
        if cap is None or len(text) <= cap:
            return [text]
        self.split_docs += 1
        return [text[i:i + cap] for i in range(0, len(text), cap)]

    def check(self) -> None:
        """Raise DataError if the file cannot be read as documents."""

    def batches(self) -> Iterator[list[str]]:
        raise NotImplementedError


# file suffix -> reader; the registered name is the class's `suffix`
READERS = Registry("document reader", attr="suffix")


def supported_suffixes() -> list[str]:
    return READERS.names()


def reader_for(path: str | Path, text_field: str = "text", batch_rows: int = 1024, max_doc_chars: int | None = None,
               max_row_group_bytes: int = MAX_ROW_GROUP_BYTES) -> DocumentReader:
    path = Path(path)
    if path.suffix.lower() not in READERS:
        raise DataError(f"{path}: cannot read `{path.suffix}` files; supported: "
                        f"{', '.join(supported_suffixes())}")
    return READERS[path.suffix.lower()](path, text_field, batch_rows, max_doc_chars, max_row_group_bytes)


@READERS.register(".parquet")
class ParquetReader(DocumentReader):
    def _open(self, dictionary: bool = False):
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
        tp = tp.value_type if pa.types.is_dictionary(tp) else tp
        if not (pa.types.is_string(tp) or pa.types.is_large_string(tp)):
            raise DataError(f"{self.path}: column `{self.text_field}` has type {tp}, expected a string column")
        self._check_sizes(pf)
        # dictionary-encoded as stored: a value repeated in every row is held once, not once per row
        return pq.ParquetFile(self.path, read_dictionary=[self.text_field]) if dictionary else pf

    def _check_sizes(self, pf) -> None:
        """Refuse, from the metadata alone, a row group whose text decompresses past max_row_group_bytes."""
        meta = pf.metadata
        column = pf.schema_arrow.get_field_index(self.text_field)
        for i in range(meta.num_row_groups):
            chunk = meta.row_group(i).column(column)
            if chunk.total_uncompressed_size > self.max_row_group_bytes:
                raise DataError(f"{self.path}: row group {i} of column `{self.text_field}` decompresses to "
                                f"{chunk.total_uncompressed_size:,} bytes ({chunk.total_compressed_size:,} on disk), "
                                f"over data.tokenize.max_row_group_bytes={self.max_row_group_bytes:,}; rewrite the "
                                "file with smaller row groups, or raise the limit if the machine has the memory")

    def check(self) -> None:
        self._open()

    def batches(self) -> Iterator[list[str]]:
        """Lists of batch_rows documents (fewer at the end, or where BATCH_BYTES of text are reached): pyarrow's
        dictionary-encoded batches end at row groups, so they are regrouped here."""
        pf = self._open(dictionary=True)
        batch, size = [], 0
        for record_batch in pf.iter_batches(batch_size=self.batch_rows, columns=[self.text_field]):
            for doc in self._texts(record_batch.column(0)):
                batch.append(doc)
                size += len(doc)
                if len(batch) >= self.batch_rows or size >= BATCH_BYTES:
                    yield batch
                    batch, size = [], 0
        if batch:
            yield batch

    def _texts(self, col) -> Iterator[str]:
        """The non-empty documents of one row batch, each at most max_doc_chars long; lengths are read in Arrow
        first, so a batch over BATCH_BYTES or with a longer document is converted one document at a time."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        values, rows = (col.dictionary, pc.fill_null(col.indices, 0)) if pa.types.is_dictionary(col.type) \
            else (col, None)
        value_len = pc.fill_null(pc.binary_length(values), 0).to_numpy(zero_copy_only=False)
        idx = None if rows is None else rows.to_numpy(zero_copy_only=False)
        lengths = value_len if idx is None else value_len[idx]
        lengths = np.where(col.is_valid().to_numpy(zero_copy_only=False), lengths, 0)
        cap = self.max_doc_chars
        if len(lengths) == 0 or (lengths.sum() <= BATCH_BYTES and (cap is None or lengths.max() <= cap)):
            yield from (t for t in col.to_pylist() if t)  # the common case: one conversion for the batch
            return
        for i in np.flatnonzero(lengths):
            value = values[int(i if idx is None else idx[i])]
            if cap is None or lengths[i] <= cap:
                yield value.as_py()
            else:
                yield from self._split_value(value)

    def _split_value(self, value) -> Iterator[str]:
        """A string value longer than max_doc_chars bytes, decoded piece by piece from its Arrow buffer (never
        whole): each piece at most max_doc_chars bytes, cut at a character boundary."""
        self.split_docs += 1
        data = memoryview(value.as_buffer())
        cap, start = self.max_doc_chars, 0
        while start < len(data):
            end = min(start + cap, len(data))
            while end < len(data) and end > start + 1 and data[end] & 0xC0 == 0x80:  # inside a UTF-8 sequence
                end -= 1
            yield bytes(data[start:end]).decode("utf-8", errors="replace")
            start = end


@READERS.register(".jsonl")
class JsonlReader(DocumentReader):
    max_line_bytes: ClassVar[int] = JSONL_MAX_LINE_BYTES

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
            for lineno, line in bounded_lines(f, self.path, self.max_line_bytes):
                if line.strip():
                    self._text(line, lineno)
                    return

    def batches(self) -> Iterator[list[str]]:
        batch: list[str] = []
        with user_paths(), self.path.open("rb") as f:
            for lineno, line in bounded_lines(f, self.path, self.max_line_bytes):
                if not line.strip():
                    continue
                text = self._text(line, lineno)
                if text:
                    batch += self.pieces(text)
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
        pieces = self.pieces(text) if text else []
        for i in range(0, len(pieces), 16):  # a long file split into pieces: a few at a time
            yield pieces[i:i + 16]


@READERS.register(".md")
class MarkdownReader(TextReader):
    """Read as plain text."""


@READERS.register(".rst")
class RestructuredTextReader(TextReader):
    """Read as plain text."""
