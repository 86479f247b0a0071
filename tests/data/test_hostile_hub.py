"""A hub that lies: listings with escaping paths, cross-host pagination, malformed JSON shapes, bodies
longer than announced. Each must end in a DownloadError with nothing written outside data/raw."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from data_helpers import FakeHub, data_config, fake_docs, parquet_bytes, shard_files

from posbench.data import hub as hub_api
from posbench.data.download import Downloader, select_files
from posbench.data.layout import DataLayout
from posbench.errors import DownloadError

TREE = "data.source={name: hub_tree, folder: ''}"


class Recorder:
    """Another host: records every request's Authorization header, answers an empty listing."""

    def __init__(self):
        self.auth: list[str | None] = []
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                rec.auth.append(self.headers.get("Authorization"))
                FakeHub._send(self, 200, b"[]", {"Content-Type": "application/json"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        # "localhost" vs "127.0.0.1": a different host name, as a real foreign domain would be
        self.url = f"http://localhost:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class ListingHub(FakeHub):
    """FakeHub whose tree API answers `listing` verbatim (plus an optional Link header)."""

    def __init__(self, listing, link: str = ""):
        super().__init__(shard_files(1))
        self.listing, self.link = listing, link

    def _handle(self, h):
        if h.path.startswith("/api/"):
            headers = {"Link": f'<{self.link}>; rel="next"'} if self.link else {}
            return self._send(h, 200, json.dumps(self.listing).encode(), headers)
        return super()._handle(h)


def download(cfg):
    layout = DataLayout.from_config(cfg)
    files = layout.source.remote_files(timeout=10)
    return Downloader(layout.source, cfg.download).run(select_files(files, cfg.splits, None))


@pytest.mark.parametrize("name", ["../../../evil.parquet", "a/../../evil.parquet", "/tmp/evil.parquet",
                                  "a//evil.parquet", "a\\..\\evil.parquet"])
def test_listing_paths_escaping_the_raw_folder_are_refused(tmp_path, name):
    size = len(parquet_bytes(fake_docs(5, 0)))
    listing = [{"type": "file", "path": n, "size": size} for n in (name, "ok.parquet")]
    with ListingHub(listing) as lhub:
        cfg = data_config(tmp_path / "root", TREE, endpoint=lhub.url, num_shards=None)
        with pytest.raises(DownloadError, match="refusing path"):
            download(cfg)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == [], written  # nothing anywhere, inside or outside data/raw


def test_credentials_never_follow_pagination_to_another_host(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    other = Recorder()
    try:
        page = [{"type": "file", "path": "a.parquet", "size": 3}]
        with ListingHub(page, link=f"{other.url}/api/datasets/x/tree/main?cursor=1") as lhub:
            cfg = data_config(tmp_path, TREE, endpoint=lhub.url, num_shards=None)
            with pytest.warns(UserWarning, match="plain http"), \
                    pytest.raises(DownloadError, match="paginates to another host"):
                download(cfg)
    finally:
        other.close()
    assert other.auth == []  # the foreign host was never even asked


def test_token_goes_to_the_configured_host_only():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_TOKEN", "hf_secret")
        req = hub_api.request("https://huggingface.co/api/x", "https://huggingface.co")
        other = hub_api.request("https://evil.example/api/x", "https://huggingface.co")
        plain = hub_api.request("http://huggingface.co/api/x", "https://huggingface.co")
    assert req.unredirected_hdrs.get("Authorization") == "Bearer hf_secret"
    assert "Authorization" not in other.unredirected_hdrs and "Authorization" not in plain.unredirected_hdrs


@pytest.mark.parametrize("listing, message", [
    ({"type": "file", "path": "a.parquet", "size": 3}, "answered a JSON dict, expected a list"),
    (["a.parquet"], "is not an object"),
    ([{"type": "file", "path": "a.parquet", "size": "3 MB"}], "has size '3 MB'"),
    ([{"type": "file", "path": "a.parquet", "size": -1}], "has size -1"),
    ([{"type": "file", "path": 7, "size": 3}], "refusing path 7"),
])
def test_malformed_listings_are_download_errors(tmp_path, listing, message):
    with ListingHub(listing) as lhub:
        cfg = data_config(tmp_path, TREE, endpoint=lhub.url, num_shards=None)
        with pytest.raises(DownloadError, match=message):
            download(cfg)


def test_body_longer_than_listed_is_cut_off_and_not_kept(tmp_path):
    files = shard_files(3)
    with FakeHub(files, redirect=False) as hub:
        hub.tree_size["shard_00000.parquet"] = 1000  # the listing promises 1000 bytes, the body is ~24 KB
        cfg = data_config(tmp_path, endpoint=hub.url, num_shards=3)
        with pytest.raises(DownloadError, match="more than the expected 1000 bytes"):
            download(cfg)
        raw = DataLayout.from_config(cfg).raw_dir
        assert not list(raw.glob("shard_00000*"))  # neither the file nor its .part
