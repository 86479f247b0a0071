"""`posbench eval` / eval.py: checkpoints and familiar flags, mapped onto EvalConfig fields.

    posbench eval checkpoints/tiny_rope_2.35B_s42/latest --suite all
    posbench eval ckpt_a ckpt_b ckpt_c --suite ppl --lengths 512,1024,2048,4096,8192
    posbench eval ckpt --suite ppl --rope-scaling yarn --rope-factor 4 --ppl-text notes/*.txt
    posbench eval ckpt --suite algorithmic --tasks reverse,sort --set algorithmic.shots=[0,5]
"""

from __future__ import annotations

import argparse

from posbench.cli.arg_types import positive_int, threads_setting
from posbench.cli.errors_cli import cli_entry
from posbench.config_loader import dump_yaml, nested
from posbench.errors import ConfigError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eval.py", description="Evaluate checkpoints: perplexity vs length, "
                                "algorithmic tasks in/out of distribution, passkey, needle in a haystack.")
    p.add_argument("checkpoints", nargs="*", metavar="CKPT", help="run directory, its `latest`, or a step_N dir")
    from posbench.evaluation.suites import ALL, BY_NAME

    p.add_argument("--suite", help=f"comma-separated: {', '.join(ALL)}, or all (default all: these); "
                                   f"by name only: {', '.join(BY_NAME)} (lambada's data: python -m "
                                   "posbench.evaluation.prepare_data)")
    p.add_argument("--limit", type=positive_int, metavar="N",
                   help="at most N items per suite cell (length, depth, task/split/shots): the first N of the full "
                        "run, for a quick look (default: every item)")
    p.add_argument("--lengths", help="context lengths in tokens, e.g. 512,1024,2048 (default 0.5x..8x seq_len)")
    p.add_argument("--rope-scaling",
                   help="RoPE length extension at evaluation time: pi, ntk, dynamic, yarn, yarn_paper, llama3, "
                        "none (longrope needs its factor lists: --set rope_scaling.short_factor=[...])")
    p.add_argument("--rope-factor", type=float, help="with --rope-scaling: target length / training length")
    p.add_argument("--dope", action="store_true",
                   help="DoPE (arXiv 2511.09146, posbench's reading: docs/pe_defaults.md): calibrate at each length, "
                        "then denoise the 3 lowest-entropy heads' keys with Gaussian noise (--set dope.mode=all, "
                        "dope.n_heads=5, ...); the paper pairs it with --rope-scaling dynamic")
    p.add_argument("--out", help="output directory (default: <run>/eval/<step_N> for one checkpoint, runs/eval_<time>)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"])
    p.add_argument("--precision", choices=["auto", "fp32", "bf16"])
    p.add_argument("--batch-size", type=int)
    p.add_argument("--threads", type=threads_setting,
                   help="intra-op threads: a count, or auto (default: OMP_NUM_THREADS if set, else 1, the fastest for "
                        "small models on a shared CPU; docs/performance.md)")
    p.add_argument("--seed", type=int, help="which task examples are asked (default 0)")
    p.add_argument("--tasks", help="algorithmic tasks, comma-separated (default: every registered task)")
    from posbench.evaluation.eval_config import text_suites

    readers = ", ".join(text_suites())
    p.add_argument("--ppl-text", nargs="+", metavar="PATH",
                   help=f"the perplexity text is local files (.txt/.jsonl/.parquet), for every suite that reads it "
                        f"({readers})")
    p.add_argument("--ppl-data", help=f"the perplexity text of {readers}: shards (default), text, wikitext103, pg19")
    p.add_argument("--data-root", help="where the checkpoints' tokenizer files and shards live (default: theirs)")
    p.add_argument("--allow-tokenizer-mismatch", action="store_true",
                   help="evaluate although the tokenizer files now differ from the ones the checkpoint was "
                        "trained with (the results then measure another tokenization)")
    p.add_argument("--config", action="append", default=[], metavar="FILE.yaml", help="eval options (repeatable)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any option, e.g. ppl.stride=256, passkey.n_samples=16 (repeatable; see --print-config)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--print-config", action="store_true", help="print the resolved options and exit")
    p.add_argument("--list-suites", action="store_true", help="print the suites and exit")
    return p


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def flag_overrides(args: argparse.Namespace) -> list[dict]:
    """Flags as mappings of the typed values argparse read, applied before --set (so --set wins).

    The values are placed at their fields as they are (never written out as YAML text to be parsed
    again), and the strict loader types and checks them like any other source."""
    out = []
    if args.suite:
        out.append({"suites": _csv(args.suite)})
    if args.lengths:
        out.append({"lengths": _csv(args.lengths)})  # "512" -> 512 in the loader; "abc" fails there by name
    if args.rope_factor is not None and not args.rope_scaling:
        raise ConfigError("--rope-factor needs --rope-scaling (pi, ntk, dynamic, yarn, yarn_paper or llama3)")
    if args.rope_scaling:
        factor = args.rope_factor if args.rope_factor is not None else 1.0
        out.append({"rope_scaling": {"name": args.rope_scaling, "factor": factor}})
    if args.dope:
        out.append({"dope": {}})  # the defaults, the paper's headline row; --set dope.x=... refines them
    for flag in ("device", "precision", "batch_size", "seed", "data_root", "threads", "limit"):
        if getattr(args, flag) is not None:
            out.append({flag: getattr(args, flag)})
    if args.tasks:
        out.append(nested("algorithmic.tasks", [{"name": t} for t in _csv(args.tasks)]))
    # the perplexity text of every suite that reads it (ppl, first_token), so `--suite ppl,first_token --ppl-text F`
    # scores both on F rather than sending first_token to the validation shards
    data = {"name": "text", "paths": list(args.ppl_text)} if args.ppl_text else {"name": args.ppl_data}
    if args.ppl_text or args.ppl_data:
        from posbench.evaluation.eval_config import text_suites

        out += [nested(f"{name}.data", data) for name in text_suites()]
    if args.no_progress:
        out.append({"progress": False})
    if args.allow_tokenizer_mismatch:
        out.append({"allow_tokenizer_mismatch": True})
    return out


@cli_entry
def main_eval(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from posbench.evaluation.eval_config import load_eval_config
    from posbench.evaluation.suites import get_suite, suite_names

    if args.list_suites:
        print("\n".join(f"{name:<12} {get_suite(name).title}" for name in suite_names()))
        return 0
    # Errors become one line and the exit code of their kind in errors_cli.cli_entry, as in every command
    # (a damaged checkpoint: 4, here as in train --resume and export).
    cfg = load_eval_config(args.config, flag_overrides(args) + args.set)
    if args.print_config:
        print(dump_yaml(cfg), end="")
        return 0
    from posbench.evaluation.eval_runner import run_eval

    run_eval(args.checkpoints, cfg, args.out)
    return 0


main = main_eval
