"""Data preparation CLI: download, tokenize (training the BPE first if needed), info; the evaluation sets.

    posbench data download --max-shards 100
    posbench data tokenize
    posbench data info
    posbench data tokenize --data fineweb_edu data.tokenizer.name=gpt2

Any command takes config sources after it: YAML files (with a top-level `data:` mapping) and dotted
overrides such as `data.root=/scratch/data` or `data.source.name=local data.source.paths=[my/*.jsonl]`.
With none, the defaults are configs/data/fineweb_edu.yaml's. Exit codes: 0 ok, 2 bad input (a config, a data
file, an unreachable hub: one line `error: ...`), 5 disk full; 1 is a bug (with its traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time

from posbench.cli.errors_cli import cli_entry


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="posbench data", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=help)
        c.add_argument("sources", nargs="*", metavar="FILE.yaml | data.key=value",
                       help="YAML presets merged left to right, then dotted overrides (an existing file is "
                            "read as YAML even with `=` in its name)")
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
    e = sub.add_parser("download-eval", help=EVAL_SETS_HELP, description=_EVAL_SETS_DOC,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _eval_sets_arguments(e)
    return p


# `download-eval` = `python -m posbench.evaluation.prepare_data` (its --help text, kept)
EVAL_SETS_HELP = "fetch the evaluation sets (WikiText-103, PG-19, LAMBADA test files), verified"
_EVAL_SETS_DOC = """\
Fetch the evaluation sets once, verified and cached like the FineWeb download (data/download.py: `.part`
files, size and sha256 from the hub's tree API, atomic rename, a manifest, resume):

    python -m posbench.evaluation.prepare_data                    # wikitext103 pg19 lambada
    python -m posbench.evaluation.prepare_data lambada --root /scratch/data
    HF_ENDPOINT=https://mirror.example python -m posbench.evaluation.prepare_data wikitext103

Files land in <root>/raw/<repo>__<folder>/ (root: --root, default `data`, the default data.root). Nothing
else ever downloads them: eval.py's `ppl.data=wikitext103|pg19` and `--suite lambada` read these verified
files (or a local `datasets` cache / ppl.data.path), so evaluation runs offline.
"""


def _eval_sets_arguments(p: argparse.ArgumentParser) -> None:
    from posbench.evaluation.eval_sets import EVAL_SETS

    p.add_argument("names", nargs="*", metavar="NAME", help=f"which sets ({', '.join(EVAL_SETS)}); default all")
    p.add_argument("--root", default="data", help="data root (default: data)")
    p.add_argument("--endpoint", default="", help="hub URL (default: $HF_ENDPOINT, else huggingface.co)")


def download_eval(args: argparse.Namespace) -> int:
    from posbench.evaluation.eval_sets import EVAL_SETS, check_names, prepare

    check_names(args.names)
    with sigterm_interrupts():
        prepare(args.names or list(EVAL_SETS), args.root, args.endpoint)
    return 0


@cli_entry
def main_eval_sets(argv: list[str] | None = None) -> int:
    """`python -m posbench.evaluation.prepare_data [NAME ...] [--root DIR] [--endpoint URL]`."""
    p = argparse.ArgumentParser(prog="python -m posbench.evaluation.prepare_data", description=_EVAL_SETS_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _eval_sets_arguments(p)
    return download_eval(p.parse_args(argv))


def _config(args):
    from posbench.config import load_config, preset_path
    from posbench.config_loader import nested, split_sources

    files, overrides = split_sources(args.sources)
    if args.data:
        files.insert(0, preset_path("data", args.data))
    if getattr(args, "max_shards", None) is not None:
        overrides.append(nested("data.download.max_train_shards", args.max_shards))
    if getattr(args, "workers", None) is not None:
        overrides.append(nested(f"data.{args.command}.workers", args.workers))
    cfg = load_config(files, overrides)
    if args.command == "tokenize":  # a run config whose PE reads position ids its data cannot carry: before any work
        from posbench.training.batch_sources import check_data_positions

        check_data_positions(cfg)
    return cfg.data


@contextlib.contextmanager
def sigterm_interrupts():
    """SIGTERM (a scheduler's stop, `kill`) stops like Ctrl-C: the download workers are cut at once and the
    `.part` files kept to resume, instead of the process dying mid-write."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_download(cfg) -> None:
    from posbench.data.download import download_corpus

    with sigterm_interrupts():
        download_corpus(cfg)


def cmd_tokenize(cfg) -> None:
    from posbench.data.tokenize_shards import tokenize

    tokenize(cfg)


def cmd_train_tokenizer(cfg, force: bool) -> None:
    from posbench.data.tokenize_shards import train_tokenizer

    train_tokenizer(cfg, force)


def cmd_info(cfg, verify: bool) -> None:
    from posbench.data.info import describe
    from posbench.errors import DataError

    report = describe(cfg, verify=verify)
    print(report)
    if verify and " BAD: " in report:  # the report named each bad shard: the command must not say "fine" (exit 0)
        raise DataError("data info --verify found bad shards (the lines with BAD above); delete them and re-run "
                        "`posbench data tokenize`")


COMMANDS = {"download": lambda cfg, args: cmd_download(cfg), "tokenize": lambda cfg, args: cmd_tokenize(cfg),
            "train-tokenizer": lambda cfg, args: cmd_train_tokenizer(cfg, args.force),
            "info": lambda cfg, args: cmd_info(cfg, args.verify)}


@cli_entry
def main(argv: list[str] | None = None) -> int:
    """Data errors (a bad config, an unreachable hub, a corpus too small for the vocabulary) exit through
    the shared handler: one line `error: ...`, exit 2."""
    args = _parser().parse_args(argv)
    if args.command == "download-eval":
        return download_eval(args)
    from posbench.data.hints import config_args

    t0 = time.perf_counter()
    try:
        with config_args([*(["--data", args.data] if args.data else []), *args.sources]):
            COMMANDS[args.command](_config(args), args)
    except KeyboardInterrupt:
        print("interrupted; finished files are kept, re-run the same command to resume", file=sys.stderr)
        return 130
    if args.command != "info":
        print(f"done in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
