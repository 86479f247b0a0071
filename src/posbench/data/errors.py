"""Errors of the data stage. Every message names the file or URL and says what to do about it.

Defined once in `posbench.errors` (with their exit code, 2); importable from here as before.
"""

from posbench.errors import DataError, DownloadError, ShardError

__all__ = ["DataError", "DownloadError", "ShardError"]
