"""The Hugging Face hub's HTTP layout, spoken with urllib (no extra dependency):

    file:  {endpoint}/datasets/{repo}/resolve/{revision}/{path}     (302 to a CDN for LFS/Xet files)
    tree:  {endpoint}/api/datasets/{repo}/tree/{revision}[/{folder}]?recursive=true
           -> JSON list of {"type": "file", "path", "size", "lfs": {"oid": sha256, "size"}}, paginated
              with a `Link: <next-url>; rel="next"` header

The endpoint is the config value, else $HF_ENDPOINT (mirrors, tests), else https://huggingface.co.
$HF_TOKEN, when set, is sent as a bearer token to the hub only (never forwarded to the CDN).
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import quote

from posbench.data.errors import DownloadError

DEFAULT_ENDPOINT = "https://huggingface.co"
USER_AGENT = "posbench-data/0.1"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def resolve_endpoint(configured: str = "") -> str:
    endpoint = (configured or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    if not endpoint.startswith(("http://", "https://")):
        raise DownloadError(f"hub endpoint `{endpoint}` must start with http:// or https:// "
                            "(set data.source.endpoint or HF_ENDPOINT)")
    return endpoint


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


def request(url: str, headers: dict | None = None) -> urllib.request.Request:
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})
    req.captured = {}
    token = os.environ.get("HF_TOKEN")
    if token:
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
            with open_url(request(url), timeout) as resp:
                body = json.loads(resp.read())
                url = _next_link(resp.headers.get("Link"))
        except urllib.error.HTTPError as e:
            raise DownloadError(f"hub tree API answered {e.code} for {e.url}; check data.source.repo, "
                                "revision and folder") from None
        except json.JSONDecodeError as e:
            raise DownloadError(f"hub tree API at {url} did not answer JSON ({e})") from None
        except (urllib.error.URLError, OSError) as e:
            raise HubUnreachable(f"cannot reach the hub at {endpoint} ({getattr(e, 'reason', e)}); check the "
                                 "network, or HF_ENDPOINT / data.source.endpoint") from None
        for item in body:
            if item.get("type") != "file":
                continue
            lfs = item.get("lfs") or {}
            entries.append(TreeEntry(item["path"], int(lfs.get("size", item.get("size", -1))),
                                     sha256_from_etag(lfs.get("oid"))))
    return entries
