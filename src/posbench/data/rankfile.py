"""Tokenizer files without pickle: a tiktoken rank file plus a JSON sidecar, and the fingerprint.

    tokenizer.tiktoken   one line per mergeable token, by rank:  base64(token bytes) SPACE rank
    tokenizer.json       {"format", "name", "pattern", "special_tokens": {"<|bos|>": id}, "vocab_size",
                          "fingerprint", ...}

We parse the rank file ourselves and build `tiktoken.Encoding` from its contents: tiktoken's own
`load_tiktoken_bpe` caches files keyed by their *path*, so a retrained tokenizer at the same path
would silently load the stale cached ranks.

The fingerprint is the sha256 of a canonical serialisation (pattern, ranks, special tokens): two
tokenizers with the same fingerprint produce the same tokens. Shard headers store its first 16 bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from pathlib import Path

from posbench.data.hints import data_command
from posbench.errors import DataError
from posbench.fileio import atomic_open, read_json, write_json

FORMAT = "posbench-tiktoken-v1"
RANKS_NAME = "tokenizer.tiktoken"
SIDECAR_NAME = "tokenizer.json"


def serialize_ranks(ranks: dict[bytes, int]) -> bytes:
    lines = [base64.b64encode(tok) + b" " + str(rank).encode() for tok, rank in
             sorted(ranks.items(), key=lambda kv: kv[1])]
    return b"\n".join(lines) + b"\n"


def fingerprint(pattern: str, ranks: dict[bytes, int], special_tokens: dict[str, int]) -> str:
    h = hashlib.sha256()
    h.update(b"posbench-tokenizer-v1\n")
    h.update(pattern.encode("utf-8") + b"\n")
    h.update(serialize_ranks(ranks))
    h.update(json.dumps(special_tokens, sort_keys=True).encode())
    return h.hexdigest()


def parse_ranks(data: bytes, path: Path) -> dict[bytes, int]:
    """Parse rank-file bytes strictly: every line, rank uniqueness, all 256 single bytes present."""
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError("expected `base64 rank`")
            token, rank = base64.b64decode(parts[0], validate=True), int(parts[1])
        except (ValueError, binascii.Error) as e:
            raise DataError(f"{path}:{lineno}: bad rank line {line[:60]!r} ({e}); the file is corrupt, "
                            "retrain the tokenizer or restore the file") from None
        if token in ranks:
            raise DataError(f"{path}:{lineno}: token {token!r} listed twice; the file is corrupt")
        ranks[token] = rank
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise DataError(f"{path}: ranks are not exactly 0..{len(ranks) - 1}; the file is corrupt")
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise DataError(f"{path}: {len(missing)} single-byte tokens missing (e.g. byte {missing[0]}); "
                        "a byte-level BPE needs all 256 to encode any text")
    return ranks


def save(folder: str | Path, name: str, pattern: str, ranks: dict[bytes, int],
         special_tokens: dict[str, int], extra: dict | None = None) -> str:
    """Write rank file then sidecar (the sidecar last: its presence marks a complete tokenizer)."""
    folder = Path(folder)
    fp = fingerprint(pattern, ranks, special_tokens)
    with atomic_open(folder / RANKS_NAME, "wb") as f:
        f.write(serialize_ranks(ranks))
    sidecar = {"format": FORMAT, "name": name, "pattern": pattern, "special_tokens": special_tokens,
               "vocab_size": len(ranks) + len(special_tokens), "fingerprint": fp, **(extra or {})}
    write_json(folder / SIDECAR_NAME, sidecar)
    return fp


def load(folder: str | Path) -> tuple[dict, dict[bytes, int]]:
    """(sidecar, ranks) from `folder`, checked against each other and the recorded fingerprint."""
    folder = Path(folder)
    side_path, ranks_path = folder / SIDECAR_NAME, folder / RANKS_NAME
    sidecar = read_json(side_path)
    if sidecar is None or not ranks_path.is_file():
        raise DataError(f"no trained tokenizer in {folder} (needs {RANKS_NAME} and {SIDECAR_NAME}); train "
                        f"it with `{data_command('train-tokenizer')}` (or `tokenize`)")
    if sidecar.get("format") != FORMAT:
        raise DataError(f"{side_path}: format {sidecar.get('format')!r}, expected {FORMAT!r}")
    for key in ("name", "pattern", "special_tokens", "fingerprint"):
        if key not in sidecar:
            raise DataError(f"{side_path}: missing key `{key}`; retrain the tokenizer")
    ranks = parse_ranks(ranks_path.read_bytes(), ranks_path)
    specials = {str(k): int(v) for k, v in sidecar["special_tokens"].items()}
    ids = sorted(specials.values())
    if ids != list(range(len(ranks), len(ranks) + len(specials))):
        raise DataError(f"{side_path}: special token ids {ids} must follow the {len(ranks)} ranks directly")
    actual = fingerprint(sidecar["pattern"], ranks, specials)
    if actual != sidecar["fingerprint"]:
        raise DataError(f"{folder}: the rank file does not match its sidecar (fingerprint {actual[:16]}... vs "
                        f"recorded {sidecar['fingerprint'][:16]}...); one of the two files was changed, "
                        "retrain or restore both")
    sidecar["special_tokens"] = specials
    return sidecar, ranks
