"""Where input files come from: a registry of small source classes, each numbering its files 0..N-1.

    hub        numbered files of a hub dataset repo, `pattern.format(index=i)` for i < num_shards
               (default: karpathy/fineweb-edu-100b-shuffle, shard_00000.parquet ... shard_01822.parquet)
    hub_tree   every `suffix` file under `folder` of a hub repo, sorted by path
               (e.g. HuggingFaceFW/fineweb-edu, folder sample/10BT)
    local      the user's parquet / jsonl / txt files matched by globs, sorted by path; no download

Hub files land in data/raw/<tag>/ and are usable once the download manifest lists them as verified.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from posbench.config_loader import Checked
from posbench.data import hub
from posbench.data.manifest import Manifest
from posbench.data.readers import reader_for
from posbench.errors import ConfigError, DataError
from posbench.registry import Registry

RAW_MANIFEST = "manifest.json"


@dataclass(frozen=True)
class SourceConfig(Checked):
    """Base of every source's `Config`; `name` selects the registered source."""

    default_name: ClassVar[str] = "hub"  # used when a mapping overrides fields but gives no `name`
    name: str = "hub"
    text_field: str = "text"

    def check(self) -> None:
        """Validate this source's own fields; raise ConfigError with what to change."""

    def known_count(self) -> int | None:
        """Number of files, when known without network or disk (lets config loading check ranges)."""
        return None

    @classmethod
    def registry_lookup(cls, name: str, where: str = "data.source") -> type[SourceConfig]:
        return get_source_kind(name, where).Config


@dataclass(frozen=True)
class RemoteFile:
    index: int
    path: str  # path inside the repo
    size: int | None = None  # from the tree API, when it answered
    sha256: str | None = None


@dataclass(frozen=True)
class InputFile:
    index: int
    path: Path


class Source:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    Config: ClassVar[type[SourceConfig]] = SourceConfig
    downloadable: ClassVar[bool] = True

    def __init__(self, cfg: SourceConfig, root: str | Path):
        self.cfg = cfg
        self.root = Path(root)

    @property
    def tag(self) -> str:
        raise NotImplementedError

    @property
    def raw_dir(self) -> Path:
        return self.root / "raw" / self.tag

    def remote_files(self, timeout: float = 60.0, log=print, limits: hub.Limits | None = None) -> list[RemoteFile]:
        """The files to download; `limits` (hub.Limits.of(data.download)) bound the listing, `timeout` alone
        gives the default limits with that socket timeout."""
        raise NotImplementedError

    def inputs(self) -> list[InputFile]:
        """Files ready on disk, by index."""
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.name} {self.tag}"


SOURCES = Registry("data source")


def get_source_kind(name: str, where: str = "data.source.name") -> type[Source]:
    return SOURCES.get(name, where)


def build_source(cfg: SourceConfig, root: str | Path) -> Source:
    return get_source_kind(cfg.name)(cfg, root)


@dataclass(frozen=True)
class HubConfigBase(SourceConfig):
    repo: str = "karpathy/fineweb-edu-100b-shuffle"
    revision: str = "main"
    endpoint: str = ""  # "" = $HF_ENDPOINT, else https://huggingface.co

    def check(self) -> None:
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", self.repo):
            raise ConfigError(f"data.source.repo `{self.repo}` must look like owner/name")
        if self.endpoint and not self.endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"data.source.endpoint `{self.endpoint}` must start with http:// or https://")
        if not self.revision:
            raise ConfigError("data.source.revision must not be empty (e.g. main)")


class HubSource(Source):
    """A hub repo: files land in data/raw/<tag>/ and count once the download manifest verified them."""

    def inputs(self) -> list[InputFile]:
        """The download manifest's verified entries whose file is on disk with that size."""
        manifest = Manifest(self.raw_dir / RAW_MANIFEST, "download")
        out = []
        for key, entry in manifest.files.items():
            path = self.raw_dir / key
            if entry.get("revision") == self.cfg.revision and path.is_file() \
                    and path.stat().st_size == entry["size"]:
                out.append(InputFile(int(entry["index"]), path))
        return sorted(out, key=lambda f: f.index)


@SOURCES.register("hub")
class HubShards(HubSource):
    summary = "numbered parquet shards of a hub dataset (default: FineWeb-Edu 100B, shuffled)"

    @dataclass(frozen=True)
    class Config(HubConfigBase):
        pattern: str = "shard_{index:05d}.parquet"
        num_shards: int = 1823
        use_tree_api: bool = True  # sizes and sha256 to verify against; without it, HTTP headers only

        def check(self) -> None:
            super().check()
            try:
                first = self.pattern.format(index=0)
            except (KeyError, IndexError, ValueError) as e:
                raise ConfigError(f"data.source.pattern `{self.pattern}` must format with {{index}}: {e}") \
                    from None
            if first == self.pattern.format(index=1):
                raise ConfigError(f"data.source.pattern `{self.pattern}` must contain {{index}} "
                                  "(e.g. shard_{index:05d}.parquet)")
            if self.num_shards <= 0:
                raise ConfigError("data.source.num_shards must be > 0")

        def known_count(self) -> int | None:
            return self.num_shards

    @property
    def tag(self) -> str:
        return self.cfg.repo.replace("/", "__")

    def remote_files(self, timeout: float = 60.0, log=print, limits: hub.Limits | None = None) -> list[RemoteFile]:
        listed: dict[str, hub.TreeEntry] = {}
        if self.cfg.use_tree_api:
            endpoint = hub.resolve_endpoint(self.cfg.endpoint)
            try:
                listed = {e.path: e for e in hub.list_tree(endpoint, self.cfg.repo, self.cfg.revision,
                                                           timeout=timeout, limits=limits)}
            except hub.HubUnreachable:
                raise  # fail before any download is attempted
            except DataError as e:  # the hub answered but has no tree API (e.g. a plain mirror)
                log(f"warning: {e}\n  -> verifying downloads against HTTP headers only")
        files = []
        for i in range(self.cfg.num_shards):
            path = hub.safe_relpath(self.cfg.pattern.format(index=i), "data.source.pattern")
            entry = listed.get(path)
            files.append(RemoteFile(i, path, entry.size if entry else None, entry.sha256 if entry else None))
        return files


@SOURCES.register("hub_tree")
class HubFolder(HubSource):
    summary = "every file with a suffix under a folder of a hub repo (e.g. fineweb-edu sample/10BT)"

    @dataclass(frozen=True)
    class Config(HubConfigBase):
        repo: str = "HuggingFaceFW/fineweb-edu"
        folder: str = "sample/10BT"
        suffix: str = ".parquet"

    @property
    def tag(self) -> str:
        return (self.cfg.repo + "/" + self.cfg.folder.strip("/")).replace("/", "__")

    def remote_files(self, timeout: float = 60.0, log=print, limits: hub.Limits | None = None) -> list[RemoteFile]:
        endpoint = hub.resolve_endpoint(self.cfg.endpoint)
        entries = hub.list_tree(endpoint, self.cfg.repo, self.cfg.revision, self.cfg.folder, timeout, limits)
        entries = sorted((e for e in entries if e.path.endswith(self.cfg.suffix)), key=lambda e: e.path)
        if not entries:
            raise DataError(f"no `{self.cfg.suffix}` files under {self.cfg.folder!r} in {self.cfg.repo}@"
                            f"{self.cfg.revision}; check data.source.folder")
        return [RemoteFile(i, e.path, e.size, e.sha256) for i, e in enumerate(entries)]


@SOURCES.register("local")
class LocalFiles(Source):
    summary = "your own parquet / jsonl / txt files, by glob; nothing to download"
    downloadable = False

    @dataclass(frozen=True)
    class Config(SourceConfig):
        paths: list[str] = field(default_factory=list)  # globs, `**` allowed; sorted matches are 0..N-1
        tag: str = "local"  # folder name for its tokenizer and shards under data/

        def check(self) -> None:
            if not self.paths:
                raise ConfigError("data.source.paths is empty; list globs of your files, "
                                  "e.g. data.source.paths=[corpus/*.jsonl]")
            if not re.fullmatch(r"[\w.-]+", self.tag):
                raise ConfigError(f"data.source.tag `{self.tag}` must be a plain folder name")

    @property
    def tag(self) -> str:
        return self.cfg.tag

    def inputs(self) -> list[InputFile]:
        matches: set[str] = set()
        for pattern in self.cfg.paths:
            found = glob.glob(os.path.expanduser(pattern), recursive=True)
            if not found:
                raise DataError(f"data.source.paths: `{pattern}` matches no file (cwd {os.getcwd()})")
            matches.update(f for f in found if os.path.isfile(f))
        files = [InputFile(i, Path(p)) for i, p in enumerate(sorted(matches))]
        for f in files:
            reader_for(f.path)  # unsupported suffixes fail here, before any work
        return files
