"""The Hugging Face hub's HTTP layout, spoken with urllib (no extra dependency):

    file:  {endpoint}/datasets/{repo}/resolve/{revision}/{path}     (302 to a CDN for LFS/Xet files)
    tree:  {endpoint}/api/datasets/{repo}/tree/{revision}[/{folder}]?recursive=true
           -> JSON list of {"type": "file", "path", "size", "lfs": {"oid": sha256, "size"}}, paginated
              with a `Link: <next-url>; rel="next"` header

The endpoint is the config value, else $HF_ENDPOINT (mirrors, tests), else https://huggingface.co.
$HF_TOKEN, when set, is sent as a bearer token only to the endpoint's scheme+host (never forwarded to
the CDN, never to a host a pagination link names: such a link is refused); a warning when it would go
over plain http. Everything a listing says is untrusted: paths must stay inside the target folder,
the body must be a list of objects with numeric sizes, else DownloadError.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit

from posbench.data import paths
from posbench.data.errors import DownloadError

DEFAULT_ENDPOINT = "https://huggingface.co"
USER_AGENT = "posbench-data/0.1"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


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
        return new


_OPENER = urllib.request.build_opener(_KeepFirstHeaders())


def request(url: str, endpoint: str, headers: dict | None = None) -> urllib.request.Request:
    """A GET of `url`; the token goes along only when `url` is on the configured endpoint's host."""
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})
    req.captured = {}
    token = os.environ.get("HF_TOKEN")
    if token and origin(url) == origin(endpoint):
        req.add_unredirected_header("Authorization", f"Bearer {token}")
    return req


def open_url(req: urllib.request.Request, timeout: float):
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


def list_tree(endpoint: str, repo: str, revision: str, folder: str = "", timeout: float = 60.0
              ) -> list[TreeEntry]:
    """Every file under `folder`, following pagination. Raises DownloadError (with the URL) on failure."""
    url: str | None = tree_url(endpoint, repo, revision, folder)
    entries: list[TreeEntry] = []
    pages = 0
    while url:
        pages += 1
        if pages > 10_000:
            raise DownloadError(f"tree listing of {repo} did not end after 10000 pages ({url})")
        try:
            with open_url(request(url, endpoint), timeout) as resp:
                body = json.loads(resp.read())
                here, url = url, _next_link(resp.headers.get("Link"))
        except urllib.error.HTTPError as e:
            raise DownloadError(f"hub tree API answered {e.code} for {e.url}; check data.source.repo, "
                                "revision and folder") from None
        except json.JSONDecodeError as e:
            raise DownloadError(f"hub tree API at {url} did not answer JSON ({e})") from None
        except (urllib.error.URLError, OSError) as e:
            raise HubUnreachable(f"cannot reach the hub at {endpoint} ({getattr(e, 'reason', e)}); check the "
                                 "network, or HF_ENDPOINT / data.source.endpoint") from None
        entries += _parse_page(body, here)
        if url:
            url = urljoin(here, url)
            if origin(url) != origin(endpoint):
                raise DownloadError(f"hub tree API at {here} paginates to another host ({url}); refused "
                                    f"(only {endpoint} is trusted)")
    return entries


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
