"""Where perplexity text comes from: a registry of small classes, each giving the first n tokens of a
held-out stream in the checkpoint's tokenizer (documents joined as `<|bos|> doc0 <|bos|> doc1 ...`,
exactly as the training shards are).

    shards       the checkpoint's own validation shards (data.splits.val of its data config): the default
    text         local files (.txt = one document, .jsonl / .parquet = `text_field` per record), globs ok
    wikitext103  WikiText-103 test (Merity et al. 2016) through `datasets`, from the local cache only
    pg19         PG-19 test books (Rae et al. 2019) through `datasets`, from the local cache only

The `datasets` sources never download: they read the verified files `python -m
posbench.evaluation.prepare_data` fetched under data.root when present, else load under HF offline mode
(or from `path`, a local `save_to_disk` folder or parquet/jsonl files), and fail with what to do when the
data is not there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from posbench.config_loader import Checked
from posbench.data.layout import DataLayout
from posbench.data.loader import split_shards
from posbench.data.readers import reader_for
from posbench.data.shards import open_positions, open_shard
from posbench.data.tokenizers import Tokenizer
from posbench.errors import ConfigError, DataError
from posbench.evaluation.eval_sets import EVAL_SETS, prepared_files
from posbench.registry import Registry


@dataclass(frozen=True)
class PplDataConfig(Checked):
    default_name: ClassVar[str] = "shards"
    name: str = "shards"

    @classmethod
    def registry_lookup(cls, name: str, where: str = "ppl.data") -> type[PplDataConfig]:
        return PPL_DATA.config(name, where)


class PplData:
    name: ClassVar[str] = ""
    Config: ClassVar[type[PplDataConfig]] = PplDataConfig

    def __init__(self, cfg: PplDataConfig, run_cfg, tokenizer: Tokenizer):
        self.cfg, self.run_cfg, self.tokenizer = cfg, run_cfg, tokenizer

    def describe(self) -> str:
        raise NotImplementedError

    def documents(self) -> Iterator[str]:
        raise NotImplementedError

    def tokens(self, n: int) -> np.ndarray:
        """The first (up to) n tokens, int64. Documents are tokenized only until n are collected."""
        parts, have = [], 0
        for doc in self.documents():
            ids = self.tokenizer.encode_documents([doc])
            parts.append(ids)
            have += len(ids)
            if have >= n:
                break
        if not parts:
            raise DataError(f"perplexity data {self.describe()} holds no documents")
        return np.concatenate(parts)[:n].astype(np.int64)

    def positions(self, n: int) -> np.ndarray | None:
        """The per-token position ids of `tokens(n)` (int64), None when this text carries none."""
        return None


PPL_DATA = Registry("perplexity data", where="ppl.data")


def build_ppl_data(cfg: PplDataConfig, run_cfg, tokenizer: Tokenizer) -> PplData:
    return PPL_DATA.build(cfg, run_cfg, tokenizer)


@PPL_DATA.register("shards")
class ValidationShards(PplData):
    @dataclass(frozen=True)
    class Config(PplDataConfig):
        root: str = ""  # "" = the checkpoint's data.root

    def _paths(self) -> list[Path]:
        data_cfg = self.run_cfg.data
        if self.cfg.root:
            data_cfg = dataclasses.replace(data_cfg, root=self.cfg.root)
        layout = DataLayout.from_config(data_cfg)
        try:
            return split_shards(layout, data_cfg.splits, "val")
        except (DataError, FileNotFoundError) as e:
            raise DataError(f"perplexity data: no validation shards for this checkpoint's data config under "
                            f"{layout.tokens_dir} ({e}). Prepare them, set ppl.data.root, or evaluate on local "
                            "files with --ppl-text FILE") from None

    def describe(self) -> str:
        return f"validation shards of {self.run_cfg.data.source.name} ({self.run_cfg.data.tokenizer.tag()})"

    def _leading(self, n: int):
        """(path, header, tokens, how many of them) of each shard holding the stream's first n tokens."""
        have = 0
        for path in self._paths():
            header, toks = open_shard(path, self.tokenizer.fingerprint)
            take = min(len(toks), n - have)
            yield path, header, toks, take
            have += take
            if have >= n:
                break

    def tokens(self, n: int) -> np.ndarray:
        # already tokenized: read the memory-mapped shards directly, checked against the tokenizer
        return np.concatenate([np.asarray(toks[:take], dtype=np.int64) for _, _, toks, take in self._leading(n)])

    def positions(self, n: int) -> np.ndarray:
        """The ids the shards carry for the same tokens. Asked only for a run that trained with ids, whose data
        config names shards that carry them: shards without are refused rather than read with made-up ids."""
        parts = []
        for path, header, _, take in self._leading(n):
            pos = open_positions(path, header)
            if pos is None:
                raise DataError(f"perplexity data: {path} carries no position ids, but this checkpoint's PE "
                                f"(pe.name={self.run_cfg.pe.name}) trained on shards that did (data.mix defines "
                                "them). Re-tokenize the validation shards with this data config, or evaluate on "
                                "local files with --ppl-text FILE (scored with the text id for every token)")
            parts.append(np.asarray(pos[:take], dtype=np.int64))
        return np.concatenate(parts)


@PPL_DATA.register("text")
class TextFiles(PplData):
    @dataclass(frozen=True)
    class Config(PplDataConfig):
        paths: list[str] = field(default_factory=list)  # files or globs, read in sorted order
        text_field: str = "text"

        def check(self) -> None:
            if not self.paths:
                raise ConfigError("ppl.data.paths is empty: name the text files (--ppl-text FILE ...)")

    def files(self) -> list[Path]:
        out = []
        for pattern in self.cfg.paths:
            matches = sorted(glob.glob(os.path.expanduser(pattern)))
            if not matches:
                raise DataError(f"perplexity data: {pattern} matches no file")
            out += [Path(m) for m in matches]
        return out

    def describe(self) -> str:
        return "text files " + ", ".join(self.cfg.paths)

    def documents(self) -> Iterator[str]:
        for path in self.files():
            reader = reader_for(path, self.cfg.text_field)
            reader.check()
            for batch in reader.batches():
                yield from batch


@contextlib.contextmanager
def hf_offline():
    """Hugging Face offline mode for the duration: `datasets` then reads its cache and never downloads.
    The env vars cover a first import; the module flags cover an already imported `datasets`."""
    saved_env = {k: os.environ.get(k) for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")}
    os.environ.update({k: "1" for k in saved_env})
    import datasets
    import huggingface_hub.constants as hub_constants

    saved = (datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE)
    datasets.config.HF_HUB_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    try:
        yield datasets
    finally:
        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass(frozen=True)
class HubDatasetConfig(PplDataConfig):
    dataset: str = ""
    subset: str = ""  # the `datasets` config name
    split: str = "test"
    text_field: str = "text"
    path: str = ""  # a local save_to_disk folder or parquet/jsonl files instead of the cache


class HubDataset(PplData):
    join_rows: ClassVar[bool] = False  # True: rows are lines of one text (WikiText), not documents

    def describe(self) -> str:
        return f"{self.cfg.dataset} {self.cfg.subset} {self.cfg.split}".replace("  ", " ")

    def _load(self):
        cfg = self.cfg
        with hf_offline() as datasets:
            try:
                if cfg.path and Path(cfg.path).is_dir():
                    ds = datasets.load_from_disk(cfg.path)
                    return ds[cfg.split] if hasattr(ds, "keys") else ds
                if cfg.path:
                    kind = "json" if cfg.path.endswith((".jsonl", ".json")) else "parquet"
                    return datasets.load_dataset(kind, data_files=cfg.path, split="train")
                prepared = prepared_files(self.name, self.run_cfg.data.root) if self.name in EVAL_SETS else []
                if prepared:  # fetched and verified by prepare_data
                    kind = "json" if prepared[0].suffix in (".jsonl", ".json") else "parquet"
                    return datasets.load_dataset(kind, data_files=[str(p) for p in prepared], split="train")
                return datasets.load_dataset(cfg.dataset, cfg.subset or None, split=cfg.split)
            except Exception as e:  # datasets raises several kinds for "not cached"; all mean the same here
                raise DataError(
                    f"perplexity data `{self.name}`: {self.describe()} is not available locally "
                    f"({type(e).__name__}: {str(e)[:200]}). Evaluation never downloads: fetch it once with "
                    f"`datasets.load_dataset({cfg.dataset!r}, {cfg.subset or None!r}, split={cfg.split!r})` on "
                    f"a machine with network access (same HF_HOME), run `python -m posbench.evaluation.prepare_data "
                    f"{self.name}` (files under data.root), set ppl.data.path to a local copy, or use --ppl-text "
                    "FILE") from None

    def documents(self) -> Iterator[str]:
        ds = self._load()
        if self.cfg.text_field not in ds.column_names:
            raise DataError(f"perplexity data {self.describe()}: no column `{self.cfg.text_field}` (columns: "
                            f"{', '.join(ds.column_names)}); set ppl.data.text_field")
        rows = (r for r in ds[self.cfg.text_field] if r)
        if self.join_rows:
            yield "".join(rows)
        else:
            yield from rows


@PPL_DATA.register("wikitext103")
class WikiText103(HubDataset):
    join_rows = True  # rows are the lines of the raw files (" = Title = \n", paragraphs, blank lines)

    @dataclass(frozen=True)
    class Config(HubDatasetConfig):
        dataset: str = "Salesforce/wikitext"
        subset: str = "wikitext-103-raw-v1"


@PPL_DATA.register("pg19")
class PG19(HubDataset):
    @dataclass(frozen=True)
    class Config(HubDatasetConfig):
        dataset: str = "emozilla/pg19"  # parquet copy of deepmind/pg19 (whose loading script datasets 3+ refuses)
        subset: str = ""
