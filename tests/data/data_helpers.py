"""Shared pieces for the data tests: synthetic FineWeb-Edu-like parquet files, a loopback hub server
with the hub's URL layout and fault injection, and small configs. No network beyond 127.0.0.1."""

from __future__ import annotations

import hashlib
import io
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from posbench.config import load_config

REPO = "karpathy/fineweb-edu-100b-shuffle"
WORDS = ("the of and to in is was for on that with as by at from his an were are which this be "
         "has had it or not but first one their its new after who they have her she two been other "
         "when there all during into school also time can may more would about such these over "
         "energy cell water plant student learn history war river city number system theory").split()


def fake_docs(n_docs: int, seed: int, words=(20, 200)) -> list[str]:
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n_docs):
        n = int(rng.integers(*words))
        body = " ".join(rng.choice(WORDS, n))
        docs.append(f"Doc {seed}-{i}. {body.capitalize()}. Numbers 1234 and 56.\n\nÉtude ünïcode ✓ 日本")
    return docs


def parquet_bytes(docs: list[str], row_group_size: int = 16) -> bytes:
    """FineWeb-Edu's schema (text first, then metadata columns the pipeline must ignore)."""
    n = len(docs)
    table = pa.table({
        "text": pa.array(docs, pa.string()),
        "id": [f"<urn:uuid:{i:08d}>" for i in range(n)],
        "dump": ["CC-MAIN-2024-10"] * n,
        "url": [f"https://example.org/{i}" for i in range(n)],
        "language": ["en"] * n,
        "language_score": pa.array([0.9] * n, pa.float64()),
        "token_count": pa.array([len(d) // 4 for d in docs], pa.int64()),
        "score": pa.array([3.1] * n, pa.float64()),
        "int_score": pa.array([3] * n, pa.int64()),
    })
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=row_group_size)
    return buf.getvalue()


def shard_files(n: int, docs_per_file: int = 40, seed: int = 0) -> dict[str, bytes]:
    return {f"shard_{i:05d}.parquet": parquet_bytes(fake_docs(docs_per_file, seed + i)) for i in range(n)}


class FakeHub:
    """Serves `files` at {base}/datasets/{repo}/resolve/{rev}/{path} and the tree API at
    {base}/api/datasets/{repo}/tree/{rev}. `faults[path]` is a queue of behaviours for successive
    GETs of that file: "drop:N" (send N bytes, then close), "503", "429", "corrupt" (one byte flipped),
    "stall:N" (send N bytes, then hang with the connection open until `release` is set or the hub closes),
    "trickle:S" (one byte every S seconds), "slow-headers:S" (the status line, a byte every S seconds).
    `tree_size` overrides listed sizes; `redirect` answers 302 to a /cdn/ URL like the real hub.
    `add_repo(repo, files)` serves more dataset repos from the same endpoint (the evaluation sets)."""

    def __init__(self, files: dict[str, bytes], repo: str = REPO, revision: str = "main", page_size: int = 1000,
                 redirect: bool = True, tree: bool = True):
        self.files, self.repo, self.revision = dict(files), repo, revision
        self.repos = {repo: self.files}
        self.page_size, self.redirect, self.tree = page_size, redirect, tree
        self.faults: dict[str, list[str]] = {}
        self.tree_size: dict[str, int] = {}
        self.gets: list[str] = []  # file GETs (content requests), in order
        self.ranges: list[tuple[str, str]] = []  # (path, Range header) of each file GET
        self.lock = threading.Lock()
        self.release = threading.Event()  # ends every "stall" / "trickle" answer
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                hub._handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    def add_repo(self, repo: str, files: dict[str, bytes]) -> None:
        self.repos[repo] = dict(files)

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        for repo, files in self.repos.items():
            if self._handle_repo(h, repo, files):
                return
        self._send(h, 404, b"no route")

    def _handle_repo(self, h: BaseHTTPRequestHandler, repo: str, files: dict[str, bytes]) -> bool:
        url = urlparse(h.path)
        resolve = f"/datasets/{repo}/resolve/{self.revision}/"
        tree = f"/api/datasets/{repo}/tree/{self.revision}"
        cdn = "/cdn/" if repo == self.repo else f"/cdn/{repo}/"
        if url.path.startswith(resolve):
            path = unquote(url.path[len(resolve):])
            if path not in files:
                self._send(h, 404, b"not found")
            elif self.redirect:  # the hub itself answers with the X-Linked-* headers, the CDN with bytes
                data = files[path]
                self._send(h, 302, b"", {"Location": f"{cdn}{path}", "X-Linked-Size": str(len(data)),
                                         "X-Linked-ETag": f'"{self.sha(data)}"'})
            else:
                self._serve_file(h, path, files)
            return True
        if url.path.startswith(cdn) and unquote(url.path[len(cdn):]) in files:
            self._serve_file(h, unquote(url.path[len(cdn):]), files)
            return True
        if url.path.startswith(tree) and self.tree:
            folder = unquote(url.path[len(tree):]).strip("/")
            items = [{"type": "file", "path": p, "size": self.tree_size.get(p, len(d)), "oid": "0" * 40,
                      "lfs": {"oid": self.sha(d), "size": self.tree_size.get(p, len(d)), "pointerSize": 134}}
                     for p, d in sorted(files.items()) if p.startswith(folder)]
            start = int(parse_qs(url.query).get("cursor", ["0"])[0])
            page, rest = items[start:start + self.page_size], items[start + self.page_size:]
            headers = {"Content-Type": "application/json"}
            if rest:
                headers["Link"] = f'<{self.url}{url.path}?recursive=true&cursor={start + self.page_size}>; rel="next"'
            self._send(h, 200, json.dumps(page).encode(), headers)
            return True
        return False

    def _serve_file(self, h: BaseHTTPRequestHandler, path: str, files: dict[str, bytes] | None = None) -> None:
        files = self.files if files is None else files
        data = files[path]
        with self.lock:
            self.gets.append(path)
            self.ranges.append((path, h.headers.get("Range", "")))
            queue = self.faults.get(path, [])
            fault = queue.pop(0) if queue else ""
        if fault in ("503", "429"):
            return self._send(h, int(fault), b"busy", {"Retry-After": "0"})
        if fault == "corrupt":
            data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
        start = 0
        m = re.match(r"bytes=(\d+)-$", h.headers.get("Range", ""))
        status, headers = 200, {"ETag": f'"{self.sha(files[path])}"'}
        if m:
            start = int(m.group(1))
            if start >= len(data):
                return self._send(h, 416, b"")
            status = 206
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        if fault.startswith("slow-headers:"):
            for byte in b"HTTP/1.1 200 OK\r\n":
                if self.release.wait(float(fault.split(":")[1])):
                    return
                h.wfile.write(bytes([byte]))
                h.wfile.flush()
            return
        if fault.startswith(("stall:", "trickle:")):
            h.send_response(status)
            for k, v in {**headers, "Content-Length": str(len(body))}.items():
                h.send_header(k, v)
            h.end_headers()
            if fault.startswith("stall:"):
                h.wfile.write(body[:int(fault.split(":")[1])])
                h.wfile.flush()
                self.release.wait(60)
            else:
                for byte in body:
                    if self.release.wait(float(fault.split(":")[1])):
                        break
                    h.wfile.write(bytes([byte]))
                    h.wfile.flush()
            h.close_connection = True
            return
        if fault.startswith("drop:"):
            n = int(fault.split(":")[1])
            h.send_response(status)
            for k, v in {**headers, "Content-Length": str(len(body))}.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(body[:n])
            h.wfile.flush()
            h.close_connection = True
            return
        self._send(h, status, body, headers)

    @staticmethod
    def _send(h, status: int, body: bytes, headers: dict | None = None) -> None:
        h.send_response(status)
        for k, v in {**(headers or {}), "Content-Length": str(len(body))}.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)


def data_config(root, *overrides, endpoint: str = "", num_shards: int | None = 4):
    """A DataConfig for tests: small shard counts, fast retries, bytes tokenizer, no task mix (the shards
    hold exactly the corpus; tests/data/test_mix.py turns the mix on) unless overridden."""
    base = [f"data.root={root}", "data.mix.tasks=[]", "data.download.backoff_s=0.01",
            "data.download.max_backoff_s=0.05", "data.download.timeout_s=10", "data.download.workers=3",
            "data.tokenizer.name=bytes", "data.tokenize.workers=1", "data.tokenize.batch_rows=8"]
    if endpoint:
        base.append(f"data.source.endpoint={endpoint}")
    if num_shards is not None:
        base.append(f"data.source.num_shards={num_shards}")
    return load_config(overrides=base + list(overrides)).data
