"""A JSON manifest of finished, verified files: {"version": 1, "kind": ..., "files": {key: entry}}.

Downloads and tokenization record a file here only after it is complete and checked, so a re-run
trusts exactly these entries (and re-checks cheap facts like the size on disk). Updates come from
several threads; each one rewrites the file atomically under a lock.
"""

from __future__ import annotations

import threading
from pathlib import Path

from posbench.data.paths import safe_relpath
from posbench.errors import DataError, brief
from posbench.fileio import read_json, write_json

VERSION = 1


class Manifest:
    def __init__(self, path: str | Path, kind: str):
        self.path = Path(path)
        self.kind = kind
        self._lock = threading.Lock()
        data = read_json(self.path, default=None) or {"version": VERSION, "kind": kind, "files": {}}
        if data.get("version") != VERSION or data.get("kind") != kind or not isinstance(data.get("files"), dict):
            raise DataError(f"{self.path}: not a version-{VERSION} `{kind}` manifest; move it away and re-run "
                            "(files are then re-verified or redone)")
        for key, entry in data["files"].items():  # keys are file names joined onto the manifest's folder
            safe_relpath(key, f"{self.path} (a manifest key)")
            self._check_entry(key, entry)
        self.files: dict[str, dict] = data["files"]

    # the counts an entry may carry (download: index, size; tokenize: index, tokens, documents, ...): readers sort,
    # add and compare them, so a hand-edited `"index": "four"` is refused here, naming the file, not a TypeError later
    COUNTS = ("index", "size", "tokens", "documents")

    def _check_entry(self, key: str, entry: object) -> None:
        if not isinstance(entry, dict):
            raise DataError(f"{self.path}: the entry of `{key}` is not a JSON object; move the manifest away and "
                            "re-run (files are then re-verified or redone)")
        for field in self.COUNTS:
            if field in entry and (type(entry[field]) is not int or entry[field] < 0):
                raise DataError(f"{self.path}: `{key}` has {field} {brief(entry[field], 40)}, not a count (an integer "
                                ">= 0); move the manifest away and re-run (files are then re-verified or redone)")

    def get(self, key: str) -> dict | None:
        return self.files.get(key)

    def put(self, key: str, entry: dict) -> None:
        with self._lock:
            self.files[key] = entry
            self._save()

    def remove(self, key: str) -> None:
        with self._lock:
            if self.files.pop(key, None) is not None:
                self._save()

    def _save(self) -> None:
        write_json(self.path, {"version": VERSION, "kind": self.kind, "files": self.files})
