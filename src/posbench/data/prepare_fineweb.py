"""Data preparation CLI: download, tokenize (training the BPE first if needed), info.

    python -m posbench.data.prepare_fineweb download --max-shards 100
    python -m posbench.data.prepare_fineweb tokenize
    python -m posbench.data.prepare_fineweb info
    python -m posbench.data.prepare_fineweb tokenize --data fineweb_edu data.tokenizer.name=gpt2

Any command takes config sources after it: YAML files (with a top-level `data:` mapping) and dotted
overrides such as `data.root=/scratch/data` or `data.source.name=local data.source.paths=[my/*.jsonl]`.
With none, the defaults are configs/data/fineweb_edu.yaml's. Exit codes: 0 ok, 1 data error, 2 config.
"""

from __future__ import annotations

import argparse
import sys
import time

from posbench.cli_errors import cli_entry


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m posbench.data.prepare_fineweb", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=help)
        c.add_argument("sources", nargs="*", metavar="FILE.yaml | data.key=value",
                       help="YAML presets merged left to right, then dotted overrides")
        c.add_argument("--data", metavar="PRESET", help="a preset from configs/data/ (e.g. fineweb_edu)")
        return c

    d = command("download", "download the val, filler and first N train shards, verified")
    d.add_argument("--max-shards", type=int, metavar="N", help="train shards to fetch (val and filler always)")
    d.add_argument("--workers", type=int, help="parallel downloads")
    t = command("tokenize", "tokenize every downloaded file into token shards (resumable)")
    t.add_argument("--workers", type=int, help="worker processes (default: data.tokenize.workers)")
    tt = command("train-tokenizer", "train the BPE tokenizer on the downloaded train split")
    tt.add_argument("--force", action="store_true", help="retrain even if one is already saved")
    i = command("info", "show what is downloaded, the tokenizer, and what is tokenized")
    i.add_argument("--verify", action="store_true", help="fully validate every shard (reads all tokens)")
    return p


def _config(args):
    from posbench.config import load_config, preset_path

    files = [s for s in args.sources if "=" not in s]
    overrides = [s for s in args.sources if "=" in s]
    if args.data:
        files.insert(0, preset_path("data", args.data))
    if getattr(args, "max_shards", None) is not None:
        overrides.append(f"data.download.max_train_shards={args.max_shards}")
    if getattr(args, "workers", None) is not None:
        overrides.append(f"data.{args.command}.workers={args.workers}")
    return load_config(files, overrides).data


def cmd_download(cfg) -> None:
    from posbench.data.download import Downloader, select_files
    from posbench.data.layout import DataLayout

    layout = DataLayout.from_config(cfg)
    source = layout.source
    if not source.downloadable:
        print(f"{source.describe()}: local files, nothing to download ({len(source.inputs())} files found)")
        return
    files = source.remote_files(cfg.download.timeout_s)
    cfg.splits.check_count(len(files), source.describe())
    wanted = select_files(files, cfg.splits, cfg.download.max_train_shards)
    report = Downloader(source, cfg.download).run(wanted)
    print(f"download: {len(report.downloaded)} files fetched ({report.bytes / 2**20:,.1f} MiB in "
          f"{report.seconds:.1f}s), {len(report.skipped)} already verified -> {source.raw_dir}")


def cmd_tokenize(cfg) -> None:
    from posbench.data.tokenize_shards import tokenize

    tokenize(cfg)


def cmd_train_tokenizer(cfg, force: bool) -> None:
    import shutil

    from posbench.data.layout import DataLayout
    from posbench.data.tokenize_shards import ensure_tokenizer

    layout = DataLayout.from_config(cfg)
    kind = layout.tokenizer
    if not kind.needs_training:
        print(f"tokenizer `{kind.cfg.name}` needs no training")
        return
    if kind.is_ready() and not force:
        print(f"a trained tokenizer is already in {kind.folder} (use --force to retrain; its token shards "
              "are then redone by `tokenize`)")
        return
    if force and kind.folder.exists():
        shutil.rmtree(kind.folder)
    tok = ensure_tokenizer(cfg, layout)
    print(f"tokenizer ready: vocab {tok.vocab_size}, fingerprint {tok.fingerprint[:16]} in {kind.folder}")


def cmd_info(cfg, verify: bool) -> None:
    from posbench.data.info import describe

    print(describe(cfg, verify=verify))


COMMANDS = {"download": lambda cfg, args: cmd_download(cfg), "tokenize": lambda cfg, args: cmd_tokenize(cfg),
            "train-tokenizer": lambda cfg, args: cmd_train_tokenizer(cfg, args.force),
            "info": lambda cfg, args: cmd_info(cfg, args.verify)}


@cli_entry
def main(argv: list[str] | None = None) -> int:
    """Data errors (a bad config, an unreachable hub, a corpus too small for the vocabulary) exit through
    the shared handler: one line `error: ...`, exit 2."""
    args = _parser().parse_args(argv)
    t0 = time.perf_counter()
    try:
        COMMANDS[args.command](_config(args), args)
    except KeyboardInterrupt:
        print("interrupted; finished files are kept, re-run the same command to resume", file=sys.stderr)
        return 130
    if args.command != "info":
        print(f"done in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
