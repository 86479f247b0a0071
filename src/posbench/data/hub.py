"""The Hugging Face hub's HTTP layout, spoken with urllib (no extra dependency):

    file:  {endpoint}/datasets/{repo}/resolve/{revision}/{path}     (302 to a CDN for LFS/Xet files)
    tree:  {endpoint}/api/datasets/{repo}/tree/{revision}[/{folder}]?recursive=true
           -> JSON list of {"type": "file", "path", "size", "lfs": {"oid": sha256, "size"}}, paginated
              with a `Link: <next-url>; rel="next"` header

The endpoint is the config value, else $HF_ENDPOINT (mirrors, tests), else https://huggingface.co.
$HF_TOKEN, when set, is sent as a bearer token only to the endpoint's scheme+host (never forwarded to
the CDN, never to a host a pagination link names: such a link is refused); a warning when it would go
over plain http. Everything a listing says is untrusted: paths must stay inside the target folder
(normalised: `a/./b` is `a/b`; one path listed twice with different contents is refused, twice alike is
kept once), the body must be a list of objects with numeric sizes, else DownloadError.

Bounded in size and time (design rule: bounded): a listing's bytes over all its pages are capped
(`Limits.max_listing_bytes`, read in chunks and refused past the cap, never read whole first). Every exchange
runs under a `Watch`: the socket is recorded when it connects, and a watchdog thread cuts it (shutdown, so a
read blocked in recv returns at once) when the transfer falls below `min_bytes_per_s` on average after a grace
period (a per-file deadline: grace + size / min_bytes_per_s), or when its stop event is set (Ctrl-C). The socket
timeout alone bounds one read, not a transfer: a server sending a byte a second would never hit it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit

from posbench.data import paths
from posbench.errors import DownloadError

DEFAULT_ENDPOINT = "https://huggingface.co"
USER_AGENT = "posbench-data/0.1"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
READ_CHUNK = 64 << 10  # bytes per read: small, so a stop or a deadline is seen between chunks
WATCH_POLL_S = 0.2  # how often the watchdog checks running transfers
# defaults of data.download.* (data_config.DownloadConfig); a real hub's CDN sends megabytes a second
TIMEOUT_S = 60.0
MIN_BYTES_PER_S = 32 << 10
SLOW_GRACE_S = 30.0
MAX_LISTING_BYTES = 16 << 20  # JSON; a hub entry is ~250 bytes, so ~60,000 files (FineWeb-Edu: a few thousand)


@dataclass(frozen=True)
class Limits:
    """How long and how much one exchange may take: `timeout_s` per socket operation, `min_bytes_per_s` average
    after `grace_s` seconds (0: no floor), `max_listing_bytes` over all pages of a tree listing."""

    timeout_s: float = TIMEOUT_S
    min_bytes_per_s: float = MIN_BYTES_PER_S
    grace_s: float = SLOW_GRACE_S
    max_listing_bytes: int = MAX_LISTING_BYTES

    @classmethod
    def of(cls, cfg) -> Limits:
        """From a DownloadConfig (duck-typed)."""
        return cls(cfg.timeout_s, cfg.min_bytes_per_s, cfg.slow_grace_s, cfg.max_listing_bytes)


class Watch:
    """One HTTP exchange that another thread can cut. The worker counts bytes (`add`); the watchdog (`overdue`)
    or a stopping thread (`cut`) shuts the connection's sockets down, which ends a blocked read at once;
    `reason` then says why."""

    def __init__(self, limits: Limits, stop: threading.Event | None = None):
        self.limits, self.stop = limits, stop
        self.start = time.monotonic()
        self.bytes = 0
        self.reason: str | None = None
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        self.bytes += n
        if self.reason is None:
            self.reason = self.overdue()

    def overdue(self, now: float | None = None) -> str | None:
        if self.stop is not None and self.stop.is_set():
            return "interrupted"
        lim = self.limits
        elapsed = (time.monotonic() if now is None else now) - self.start
        if lim.min_bytes_per_s > 0 and elapsed > lim.grace_s and self.bytes < lim.min_bytes_per_s * (elapsed
                                                                                                      - lim.grace_s):
            return (f"too slow: {self.bytes:,} bytes in {elapsed:.0f}s, below data.download.min_bytes_per_s="
                    f"{lim.min_bytes_per_s:g} after the {lim.grace_s:g}s grace (data.download.slow_grace_s)")
        return None

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock)
            if self.reason is not None:
                _shutdown(sock)

    def cut(self, reason: str) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
            for sock in self._socks:
                _shutdown(sock)

    def __enter__(self) -> Watch:
        _watchdog_add(self)
        return self

    def __exit__(self, *exc) -> None:
        with _WATCHED_LOCK:
            _WATCHED.discard(self)


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


_WATCHED: set[Watch] = set()
_WATCHED_LOCK = threading.Lock()
_WATCHDOG: threading.Thread | None = None


def _watchdog_add(watch: Watch) -> None:
    global _WATCHDOG
    with _WATCHED_LOCK:
        _WATCHED.add(watch)
        if _WATCHDOG is None or not _WATCHDOG.is_alive():
            _WATCHDOG = threading.Thread(target=_watchdog, name="posbench-download-watchdog", daemon=True)
            _WATCHDOG.start()


def _watchdog() -> None:
    while True:
        time.sleep(WATCH_POLL_S)
        with _WATCHED_LOCK:
            watched = list(_WATCHED)
        now = time.monotonic()
        for watch in watched:
            reason = watch.overdue(now)
            if reason is not None:
                watch.cut(reason)


def read_chunks(resp, watch: Watch, what: str):
    """The response body in chunks of at most READ_CHUNK bytes (read1: whatever has arrived, never waiting to
    fill a large buffer), counted on `watch`; raises Cut when the watch was cut."""
    while True:
        try:
            chunk = resp.read1(READ_CHUNK)
        except OSError:
            if watch.reason is not None:
                raise Cut(what, watch.reason) from None
            raise
        if watch.reason is not None:
            raise Cut(what, watch.reason)
        if not chunk:
            return
        watch.add(len(chunk))
        yield chunk


class Cut(Exception):
    """A transfer cut by its Watch: `reason` is "interrupted" (stop event) or why it was too slow."""

    def __init__(self, what: str, reason: str):
        super().__init__(f"{what}: {reason}")
        self.reason = reason

    @property
    def interrupted(self) -> bool:
        return self.reason == "interrupted"


def resolve_endpoint(configured: str = "") -> str:
    endpoint = (configured or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    if not endpoint.startswith(("http://", "https://")):
        raise DownloadError(f"hub endpoint `{endpoint}` must start with http:// or https:// "
                            "(set data.source.endpoint or HF_ENDPOINT)")
    if endpoint.startswith("http://") and os.environ.get("HF_TOKEN"):
        warnings.warn(f"HF_TOKEN will be sent over plain http to {endpoint}; use https", stacklevel=2)
    return endpoint


def origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def safe_relpath(name: object, where: str) -> str:
    """A path from the hub, accepted only if it stays inside its target folder when joined."""
    return paths.safe_relpath(name, where, DownloadError)


def file_url(endpoint: str, repo: str, revision: str, path: str) -> str:
    return f"{endpoint}/datasets/{repo}/resolve/{quote(revision, safe='')}/{quote(path)}"


def tree_url(endpoint: str, repo: str, revision: str, folder: str = "") -> str:
    tail = f"/{quote(folder.strip('/'))}" if folder.strip("/") else ""
    return f"{endpoint}/api/datasets/{repo}/tree/{quote(revision, safe='')}{tail}?recursive=true"


def sha256_from_etag(value: str | None) -> str | None:
    """The hub's (X-Linked-)ETag is the sha256 for LFS files, a git sha1 otherwise: keep only sha256."""
    if not value:
        return None
    value = value.strip().removeprefix("W/").strip('"').lower()
    return value if _SHA256.match(value) else None


class _KeepFirstHeaders(urllib.request.HTTPRedirectHandler):
    """Record the hub's own response headers (X-Linked-Size/ETag) before following its CDN redirect."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        captured = getattr(req, "captured", {})
        for key in ("X-Linked-Size", "X-Linked-ETag", "ETag"):
            if headers.get(key) and key not in captured:
                captured[key] = headers[key]
        if new is not None:
            new.captured = captured
            new.watch = getattr(req, "watch", None)  # the CDN's connection is watched too
        return new


class _WatchSockets:
    """Handler mixin: the connection's socket is handed to the request's Watch as soon as it connects, so the
    watchdog can cut a server that trickles its headers, not only its body."""

    def do_open(self, http_class, req, **kwargs):
        watch = getattr(req, "watch", None)
        if watch is None:
            return super().do_open(http_class, req, **kwargs)

        def connection(*args, **kw):
            conn = http_class(*args, **kw)
            connect = conn.connect

            def watched_connect():
                connect()
                watch.attach(conn.sock)

            conn.connect = watched_connect
            return conn

        return super().do_open(connection, req, **kwargs)


class _HTTPHandler(_WatchSockets, urllib.request.HTTPHandler):
    pass


class _HTTPSHandler(_WatchSockets, urllib.request.HTTPSHandler):
    pass


_OPENER = urllib.request.build_opener(_KeepFirstHeaders(), _HTTPHandler(), _HTTPSHandler())


def request(url: str, endpoint: str, headers: dict | None = None) -> urllib.request.Request:
    """A GET of `url`; the token goes along only when `url` is on the configured endpoint's host."""
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})
    req.captured = {}
    token = os.environ.get("HF_TOKEN")
    if token and origin(url) == origin(endpoint):
        req.add_unredirected_header("Authorization", f"Bearer {token}")
    return req


def open_url(req: urllib.request.Request, timeout: float, watch: Watch | None = None):
    """Open `req`; with a `watch`, every connection it makes (redirects included) can be cut by it."""
    req.watch = watch
    return _OPENER.open(req, timeout=timeout)


class HubUnreachable(DownloadError):
    """No HTTP answer at all (refused, DNS, timeout): nothing else will work either."""


@dataclass(frozen=True)
class TreeEntry:
    path: str
    size: int
    sha256: str | None  # from the LFS pointer; None for plain git files


def _next_link(link_header: str | None) -> str | None:
    for part in (link_header or "").split(","):
        m = re.search(r'<([^>]+)>\s*;\s*rel="?next"?', part)
        if m:
            return m.group(1)
    return None


def list_tree(endpoint: str, repo: str, revision: str, folder: str = "", timeout: float = TIMEOUT_S,
              limits: Limits | None = None) -> list[TreeEntry]:
    """Every file under `folder`, following pagination, each path once. Raises DownloadError (with the URL) on
    failure, on a listing over `limits.max_listing_bytes` or slower than `limits.min_bytes_per_s`."""
    limits = limits or Limits(timeout_s=timeout)
    url: str | None = tree_url(endpoint, repo, revision, folder)
    entries: dict[str, TreeEntry] = {}
    pages, total = 0, 0
    while url:
        pages += 1
        if pages > 10_000:
            raise DownloadError(f"tree listing of {repo} did not end after 10000 pages ({url})")
        watch = Watch(limits)
        try:
            with watch, open_url(request(url, endpoint), limits.timeout_s, watch) as resp:
                body = bytearray()
                for chunk in read_chunks(resp, watch, f"hub tree API at {url}"):
                    body += chunk
                    if total + len(body) > limits.max_listing_bytes:
                        raise DownloadError(
                            f"hub tree API at {url}: the listing of {repo} is over data.download.max_listing_bytes="
                            f"{limits.max_listing_bytes:,} bytes (stopped reading it); raise the limit if the repo "
                            "really lists that much, or list a folder (data.source.folder)")
                total += len(body)
                body = json.loads(body)
                here, url = url, _next_link(resp.headers.get("Link"))
        except Cut as e:
            raise DownloadError(str(e)) from None
        except urllib.error.HTTPError as e:
            raise DownloadError(f"hub tree API answered {e.code} for {e.url}; check data.source.repo, "
                                "revision and folder") from None
        except json.JSONDecodeError as e:
            raise DownloadError(f"hub tree API at {url} did not answer JSON ({e})") from None
        except (urllib.error.URLError, OSError) as e:
            if watch.reason is not None:  # cut while connecting or reading the headers
                raise DownloadError(f"hub tree API at {url}: {watch.reason}") from None
            raise HubUnreachable(f"cannot reach the hub at {endpoint} ({getattr(e, 'reason', e)}); check the "
                                 "network, or HF_ENDPOINT / data.source.endpoint") from None
        for entry in _parse_page(body, here):
            seen = entries.setdefault(entry.path, entry)
            if seen != entry:
                raise DownloadError(f"hub tree API at {here} lists {entry.path} twice with different contents "
                                    f"(size {seen.size} and {entry.size}); refusing the listing")
        if url:
            url = urljoin(here, url)
            if origin(url) != origin(endpoint):
                raise DownloadError(f"hub tree API at {here} paginates to another host ({url}); refused "
                                    f"(only {endpoint} is trusted)")
    return list(entries.values())


def _parse_page(body: object, url: str) -> list[TreeEntry]:
    if not isinstance(body, list):
        raise DownloadError(f"hub tree API at {url} answered a JSON {type(body).__name__}, expected a list")
    out = []
    for item in body:
        if not isinstance(item, dict):
            raise DownloadError(f"hub tree API at {url}: listing entry {item!r} is not an object")
        if item.get("type") != "file":
            continue
        lfs = item.get("lfs") or {}
        size = lfs.get("size", item.get("size")) if isinstance(lfs, dict) else None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise DownloadError(f"hub tree API at {url}: entry {item.get('path')!r} has size {size!r}, "
                                "expected a non-negative integer")
        out.append(TreeEntry(safe_relpath(item.get("path"), f"hub tree API at {url}"), size,
                             sha256_from_etag(lfs.get("oid") if isinstance(lfs.get("oid"), str) else None)))
    return out
