"""Errors of the data stage. Every message names the file or URL and says what to do about it."""

from __future__ import annotations


class DataError(RuntimeError):
    """A data file or data step is wrong; the message names the file and the fix."""


class ShardError(DataError):
    """A token shard fails validation (header, size, token ids, tokenizer fingerprint)."""


class DownloadError(DataError):
    """A file could not be downloaded and verified."""
