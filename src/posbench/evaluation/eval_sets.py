"""The evaluation sets (WikiText-103, PG-19, LAMBADA test files), fetched once, verified and cached like the
FineWeb download (data/download.py: `.part` files, size and sha256 from the hub's tree API, atomic rename, a
manifest, resume). The command is `posbench data download-eval` (= `python -m posbench.evaluation.prepare_data`,
posbench/cli/data.py).

Files land in <root>/raw/<repo>__<folder>/ (root: --root, default `data`, the default data.root). Nothing
else ever downloads them: eval.py's `ppl.data=wikitext103|pg19` and `--suite lambada` read these verified
files (or a local `datasets` cache / ppl.data.path), so evaluation runs offline.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from posbench.config_loader import nearest
from posbench.data import hub
from posbench.data.corpus_sources import HubFolder, RemoteFile
from posbench.data.data_config import DownloadConfig
from posbench.errors import ConfigError, DataError


@dataclass(frozen=True)
class EvalSet:
    repo: str
    folder: str
    patterns: tuple[str, ...]  # fnmatch on repo paths: the first pattern with any match is taken
    summary: str


# WikiText-103 (Merity et al. 2016) and PG-19 (Rae et al. 2019) test splits as parquet; LAMBADA (Paperno et
# al. 2016) in OpenAI's detokenized test set, the one GPT-2 and lm-evaluation-harness (`lambada_openai`) score
EVAL_SETS = {
    "wikitext103": EvalSet("Salesforce/wikitext", "wikitext-103-raw-v1", ("wikitext-103-raw-v1/test-*.parquet",),
                           "WikiText-103 raw, test split"),
    "pg19": EvalSet("emozilla/pg19", "data", ("data/test-*.parquet",), "PG-19 test books (parquet copy)"),
    "lambada": EvalSet("EleutherAI/lambada_openai", "data",
                       ("data/lambada_test_en.jsonl", "data/lambada_test.jsonl"), "LAMBADA (OpenAI), test"),
}


def source(name: str, root: str | Path, endpoint: str = "") -> HubFolder:
    s = EVAL_SETS[name]
    return HubFolder(HubFolder.Config(repo=s.repo, folder=s.folder, suffix="", endpoint=endpoint), root)


def wanted(name: str, listed: list[RemoteFile]) -> list[RemoteFile]:
    for pattern in EVAL_SETS[name].patterns:
        hits = [f for f in listed if fnmatch.fnmatch(f.path, pattern)]
        if hits:
            return [RemoteFile(i, f.path, f.size, f.sha256) for i, f in enumerate(hits)]
    shown = ", ".join(f.path for f in listed[:8]) or "nothing"
    raise DataError(f"{name}: no file in {EVAL_SETS[name].repo} matches {list(EVAL_SETS[name].patterns)} "
                    f"(the listing has {shown})")


def prepared_files(name: str, root: str | Path) -> list[Path]:
    """The verified files of an evaluation set on disk (empty when it was not prepared)."""
    return [f.path for f in source(name, root).inputs()]


def prepare(names: list[str], root: str | Path, endpoint: str = "", cfg: DownloadConfig | None = None,
            log=print) -> dict[str, list[Path]]:
    from posbench.data.download import Downloader

    cfg = cfg or DownloadConfig()
    out = {}
    for name in names:
        src = source(name, root, endpoint)
        files = wanted(name, src.remote_files(cfg.timeout_s, log, hub.Limits.of(cfg)))
        report = Downloader(src, cfg, log).run(files)
        log(f"{name}: {len(report.downloaded)} downloaded, {len(report.skipped)} already verified "
            f"-> {src.raw_dir}")
        out[name] = prepared_files(name, root)
    return out


def check_names(names: list[str]) -> None:
    """Every name an evaluation set's; else ConfigError naming the nearest."""
    for name in names:
        if name not in EVAL_SETS:
            raise ConfigError(f"unknown evaluation set `{name}`; choose from {', '.join(EVAL_SETS)}"
                              + nearest(name, list(EVAL_SETS)))
