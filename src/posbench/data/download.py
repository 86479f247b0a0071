"""Parallel, resumable, verified downloads of a hub source's files into data/raw/<tag>/.

Per file: GET into `<name>.part`, resuming with a Range request after a dropped connection; retry
with exponential backoff (honouring Retry-After) on dropped connections, timeouts, 408, 429 and 5xx;
then verify the size (tree API `size`, else the hub's X-Linked-Size, else Content-Length) and the
sha256 (tree API `lfs.oid`, else a sha256-shaped X-Linked-ETag/ETag); only then os.replace it into
place and record it in manifest.json. A file failing verification is deleted, never renamed in.
Re-runs skip exactly the files the manifest lists for this revision with the same size on disk.

Bounded and stoppable: the body is read in small chunks under a `hub.Watch`, so a file slower than
`data.download.min_bytes_per_s` (after `slow_grace_s`) is cut and retried, and Ctrl-C or SIGTERM (the
command turns it into KeyboardInterrupt) cuts every open connection at once: the workers (threads) stop
within a second, each `.part` kept for the next run to resume. `.part` files and the folders under
data/raw/<source>/ are never written through a symbolic link (fileio's module doc). Files of different
splits with the same content (sha256 from the listing, then of the files downloaded) are refused.
"""

from __future__ import annotations

import http.client
import os
import re
import sys
import threading
import time
import urllib.error
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from posbench.data import hub
from posbench.data.corpus_sources import RAW_MANIFEST, HubSource, RemoteFile
from posbench.data.manifest import Manifest
from posbench.data.splits import SplitsConfig, check_disjoint_content
from posbench.errors import DownloadError
from posbench.fileio import DirLock, LinkError, fsync_dir, no_link, open_fd, remove_stale_temps, sha256_file

_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError)


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.retry_after = retry_after


@dataclass
class DownloadReport:
    downloaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    bytes: int = 0
    seconds: float = 0.0


def select_files(files: list[RemoteFile], splits: SplitsConfig, max_train: int | None) -> list[RemoteFile]:
    """Every val and filler file, plus the first `max_train` train files (all when None)."""
    out, n_train = [], 0
    for f in sorted(files, key=lambda f: f.index):
        split = splits.split_of(f.index)
        if split == "train":
            if max_train is not None and n_train >= max_train:
                continue
            n_train += 1
        if split is not None:
            out.append(f)
    return out


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


class Downloader:
    def __init__(self, source: HubSource, cfg, log=print):
        self.source, self.cfg, self.log = source, cfg, log
        self.endpoint = hub.resolve_endpoint(source.cfg.endpoint)
        self.raw_dir = source.raw_dir
        self.limits = hub.Limits.of(cfg)
        self._stop = threading.Event()  # set on Ctrl-C so worker threads stop mid-file (the .part stays)
        self._watches: set[hub.Watch] = set()  # the transfers running now
        self._watches_lock = threading.Lock()

    def stop(self) -> None:
        """Stop every worker now: the event stops queued files and the retry loops, cutting each open
        connection ends a read blocked in recv (a stalled server would hold it for timeout_s)."""
        self._stop.set()
        with self._watches_lock:
            watches = list(self._watches)
        for watch in watches:
            watch.cut("interrupted")

    def url(self, f: RemoteFile) -> str:
        return hub.file_url(self.endpoint, self.source.cfg.repo, self.source.cfg.revision, f.path)

    def is_done(self, manifest: Manifest, f: RemoteFile) -> bool:
        entry = manifest.get(f.path)
        path = self.raw_dir / f.path
        return (entry is not None and entry.get("revision") == self.source.cfg.revision and path.is_file()
                and path.stat().st_size == entry["size"] and (f.size is None or f.size == entry["size"])
                and (f.sha256 is None or f.sha256 == entry.get("sha256")))

    def run(self, files: list[RemoteFile]) -> DownloadReport:
        report, t0 = DownloadReport(), time.perf_counter()
        with DirLock(self.raw_dir, "download"):
            remove_stale_temps(self.raw_dir)
            manifest = Manifest(self.raw_dir / RAW_MANIFEST, "download")
            todo = [f for f in files if not self.is_done(manifest, f)]
            report.skipped = [f.path for f in files if f not in todo]
            if not todo:
                report.seconds = time.perf_counter() - t0
                return report
            total = sum(f.size for f in todo) if all(f.size is not None for f in todo) else None
            failures: list[str] = []
            with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="download",
                      disable=None) as bar:
                pool = ThreadPoolExecutor(max_workers=min(self.cfg.workers, len(todo)), thread_name_prefix="download")
                futures = {pool.submit(self._one, f, manifest, bar): f for f in todo}
                try:
                    for fut in as_completed(futures):
                        f = futures[fut]
                        try:
                            report.bytes += fut.result()
                            report.downloaded.append(f.path)
                        except DownloadError as e:
                            failures.append(str(e))
                            if len(failures) > 1:  # the first is the final error's text: each is printed once
                                tqdm.write(f"failed: {e}", file=sys.stderr)
                except BaseException:  # Ctrl-C, SIGTERM or an unexpected error: stop the other threads too
                    self.stop()
                    pool.shutdown(wait=True, cancel_futures=True)  # quick: every open read was just cut
                    raise
                pool.shutdown(wait=True)
        report.seconds = time.perf_counter() - t0
        if failures:
            raise DownloadError(f"{len(failures)} of {len(todo)} files failed (the others are done and recorded"
                                f"{'; the later failures are listed above' if len(failures) > 1 else ''}); "
                                f"first: {failures[0]}")
        return report

    def _interrupted(self, url: str, part: Path) -> DownloadError:
        return DownloadError(f"{url}: interrupted; re-run to resume from {part}")

    def _folders(self, rel: str) -> None:
        """Create the folders of `rel` under raw_dir, refusing a link among them (LinkError)."""
        folder = self.raw_dir
        for name in rel.split("/")[:-1]:
            folder = no_link(folder / name)
            folder.mkdir(exist_ok=True)

    def _one(self, f: RemoteFile, manifest: Manifest, bar) -> int:
        rel = hub.safe_relpath(f.path, "download")
        final = self.raw_dir / rel
        part = final.with_name(final.name + ".part")
        url = self.url(f)
        if self._stop.is_set():
            raise self._interrupted(url, part)
        try:
            self._folders(rel)
            no_link(part)
        except LinkError as e:  # this file fails, the others go on
            raise DownloadError(str(e)) from None
        if part.exists():  # bytes kept from an earlier run count as progress (a restart subtracts them)
            bar.update(part.stat().st_size)
        for attempt in range(self.cfg.retries + 1):
            if self._stop.is_set():
                raise self._interrupted(url, part)
            try:
                total, captured = self._transfer(url, part, f, bar)
                break
            except _Retryable as e:
                if attempt == self.cfg.retries:
                    raise DownloadError(f"{url}: gave up after {attempt + 1} attempts ({e}); re-run to "
                                        "resume (the partial file is kept)") from None
                delay = min(self.cfg.max_backoff_s, self.cfg.backoff_s * 2 ** attempt)
                if e.retry_after is not None:
                    delay = min(self.cfg.max_backoff_s, e.retry_after)
                self._stop.wait(delay)
        size, sha = self._verify(f, part, url, total, captured)
        part.replace(final)  # atomic over an old file: no moment without either
        fsync_dir(final.parent)
        manifest.put(f.path, {"index": f.index, "size": size, "sha256": sha, "revision":
                              self.source.cfg.revision, "checked": "sha256" if self._expected_sha(f, captured)
                              else "size"})
        return size

    def _transfer(self, url: str, part: Path, f: RemoteFile, bar) -> tuple[int | None, dict]:
        watch = hub.Watch(self.limits, self._stop)
        with watch:
            with self._watches_lock:
                self._watches.add(watch)
            try:
                return self._watched_transfer(url, part, f, bar, watch)
            except hub.Cut as e:
                if e.interrupted:
                    raise self._interrupted(url, part) from None
                raise _Retryable(e.reason) from None
            finally:
                with self._watches_lock:
                    self._watches.discard(watch)

    def _watched_transfer(self, url: str, part: Path, f: RemoteFile, bar, watch: hub.Watch
                          ) -> tuple[int | None, dict]:
        have = part.stat().st_size if part.exists() else 0
        req = hub.request(url, self.endpoint, {"Range": f"bytes={have}-"} if have else {})
        try:
            resp = hub.open_url(req, self.cfg.timeout_s, watch)
        except urllib.error.HTTPError as e:
            if e.code == 416:  # the .part is not a prefix of this file: start over
                part.unlink(missing_ok=True)
                raise _Retryable("HTTP 416 for a stale partial file, restarting") from None
            if e.code in (408, 429) or e.code >= 500:
                raise _Retryable(f"HTTP {e.code}", _retry_after(e.headers.get("Retry-After"))) from None
            hint = {404: "check data.source.repo / revision / pattern and data.source.num_shards",
                    401: "the dataset may be gated: set HF_TOKEN", 403: "the dataset may be gated: set HF_TOKEN"}
            raise DownloadError(f"{url}: HTTP {e.code} {e.reason}; {hint.get(e.code, 'not retried')}") from None
        except _NETWORK_ERRORS as e:
            if watch.reason is not None:  # cut while connecting or reading the headers
                raise hub.Cut(url, watch.reason) from None
            raise _Retryable(f"{type(e).__name__}: {e}") from None
        with resp:
            captured = {**req.captured}
            for key in ("X-Linked-Size", "X-Linked-ETag", "ETag"):
                captured.setdefault(key, resp.headers.get(key))
            m = re.match(r"bytes (\d+)-\d+/(\d+|\*)", resp.headers.get("Content-Range") or "")
            if resp.status == 206 and m and int(m.group(1)) == have:
                total, mode = (int(m.group(2)) if m.group(2) != "*" else None), "ab"
            elif resp.status == 206:
                part.unlink(missing_ok=True)
                raise _Retryable("server answered a different range than asked, restarting")
            else:
                length = resp.headers.get("Content-Length")
                total, mode = (int(length) if length else None), "wb"
                bar.update(-have)  # bytes of the old .part no longer count
            linked = captured.get("X-Linked-Size")
            limit = next((v for v in (f.size, int(linked) if linked and linked.isdigit() else None, total)
                          if v is not None), None)
            flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "ab" else os.O_TRUNC)
            try:
                # never through a link planted at the .part; unbuffered: what arrived is on disk (a kill keeps it)
                with os.fdopen(open_fd(part, flags), "wb", buffering=0) as out:
                    written = have if mode == "ab" else 0
                    for chunk in hub.read_chunks(resp, watch, url):
                        written += len(chunk)
                        if limit is not None and written > limit:  # stop a hostile/unbounded body early
                            out.close()
                            part.unlink(missing_ok=True)
                            raise DownloadError(f"{url}: the server sent more than the expected {limit} bytes; "
                                                "stopped reading, nothing kept")
                        view = memoryview(chunk)
                        while view:  # a raw file may take part of a write
                            view = view[out.write(view):]
                        bar.update(len(chunk))
                    os.fsync(out.fileno())  # the bytes are on disk before the rename makes them final
            except LinkError as e:
                raise DownloadError(str(e)) from None
            except _NETWORK_ERRORS as e:
                if watch.reason is not None:
                    raise hub.Cut(url, watch.reason) from None
                raise _Retryable(f"connection dropped mid-file ({type(e).__name__}: {e})") from None
        if total is not None and part.stat().st_size < total:
            raise _Retryable(f"connection closed at {part.stat().st_size} of {total} bytes")
        return total, captured

    @staticmethod
    def _expected_sha(f: RemoteFile, captured: dict) -> str | None:
        return f.sha256 or hub.sha256_from_etag(captured.get("X-Linked-ETag")) \
            or hub.sha256_from_etag(captured.get("ETag"))

    def _verify(self, f: RemoteFile, part: Path, url: str, total: int | None, captured: dict
                ) -> tuple[int, str]:
        size = part.stat().st_size
        linked = captured.get("X-Linked-Size")
        expected, origin = next(((v, o) for v, o in ((f.size, "the tree API"),
                                                    (int(linked) if linked else None, "X-Linked-Size"),
                                                    (total, "Content-Length")) if v is not None), (None, ""))
        if expected is None:
            part.unlink(missing_ok=True)
            raise DownloadError(f"{url}: the server gave no size to verify against; not kept")
        if size != expected:
            part.unlink(missing_ok=True)
            raise DownloadError(f"{url}: got {size} bytes but {origin} says {expected}; deleted, not kept. "
                                "Re-run to retry; if it persists the repo changed: check data.source.revision")
        sha = sha256_file(part)
        want = self._expected_sha(f, captured)
        if want is not None and sha != want:
            part.unlink(missing_ok=True)
            raise DownloadError(f"{url}: sha256 {sha[:16]}... does not match the hub's {want[:16]}... (corrupt "
                                "download); deleted, not kept. Re-run to retry")
        return size, sha


def download_corpus(cfg, log=print) -> None:
    """`posbench data download`: the val, filler and first `download.max_train_shards` train files of `cfg`'s
    source (a DataConfig), verified; a local source has nothing to fetch."""
    from posbench.data.layout import DataLayout

    source = DataLayout.from_config(cfg).source
    if not source.downloadable:
        log(f"{source.describe()}: local files, nothing to download ({len(source.inputs())} files found)")
        return
    files = source.remote_files(cfg.download.timeout_s, log, hub.Limits.of(cfg.download))
    cfg.splits.check_count(len(files), source.describe())
    wanted = select_files(files, cfg.splits, cfg.download.max_train_shards)
    # the listing's sha256 first (nothing fetched yet), then what was downloaded (hubs without a tree API)
    check_disjoint_content((cfg.splits.split_of(f.index), f.path, f.size, lambda f=f: f.sha256) for f in wanted)
    report = Downloader(source, cfg.download).run(wanted)
    manifest = Manifest(source.raw_dir / RAW_MANIFEST, "download")
    check_disjoint_content((cfg.splits.split_of(f.index), f.path, (manifest.get(f.path) or {}).get("size"),
                            lambda f=f: (manifest.get(f.path) or {}).get("sha256")) for f in wanted)
    log(f"download: {len(report.downloaded)} files fetched ({report.bytes / 2**20:,.1f} MiB in "
        f"{report.seconds:.1f}s), {len(report.skipped)} already verified -> {source.raw_dir}")
