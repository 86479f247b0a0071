"""`gpu_check.py pretrain`: the PEs pretrained on the carried corpus on the same tokens, then evaluated past the
training length. In order:

  corpus  the carried folder (--corpus, data.root of --data-config) must hold the config's tokenizer and train and
          val shards, checked before any GPU work (else one `error:` line naming make_gpu_corpus.py, exit 2)
  probe   every PE trains 8 steps through the real loop (training.loop.train, compiled, bf16, logging every step):
          tokens/s and MFU (the median after 2 steps), the cold compile and the set-up seconds (`timing`), the peak
          memory against training/memory_model.py's (the kernels mode's throughput table, at its shape). Every PE,
          not only the first: FlexAttention PEs (alibi, fox) train slower than SDPA ones, and the one token budget
          must fit the slowest. A real run reuses its probe's graph from dynamo's cache (checked through `train` on
          the CPU: no graph recompiled, 0 s instead of 12 s), so a probe costs the compile that PE needed anyway
  size    ONE number of steps for every PE (`fit_steps`): what is left of the budget, less a reserve, each PE's
          set-up plus a fifth of its cold compile, and its evaluation, over the sum of 1 / tokens/s
  train   every PE on those steps with one seed (--pretrain-seed, default 0: the same windows in the same order):
          WSD, 5% warmup, 20% decay; a step is 2 micro-batches of the preset's (tiny: 2 x 32 x 1,024 = 65,536
          tokens), so a few minutes give hundreds of steps; the final checkpoint goes to a scratch folder
  eval    every final checkpoint through eval.py's planner and runner (no plots): perplexity on the corpus's val
          split at 1x, 2x, 4x and 8x the training length under both protocols (non-overlapping windows; a window
          sliding by half its length), 65,536 tokens per length and protocol, and every long-context family at 1x
          and 2x (4 prompts per family and length, the needle at half depth). Batch 1, so a bias PE's FlexAttention
          compiles once per perplexity length; decoding's new shape per token then runs it eagerly (`evaluate`)

Every PE trains before any is evaluated: evaluation is the part whose time is only estimated (FlexAttention
compiles per shape), so a budget running out costs evaluations, never a trained PE. Rows fail alone (probe, train,
eval tables); pretrain.json has them and the sizing, pretrain_eval.json eval.py's results per checkpoint; the
table (one row per PE) prints last. `--dry-run` takes the same path on the CPU: a toy corpus made by
make_gpu_corpus.py's builder (generated sentences, a 384-token BPE), the nano model at 256 tokens, fp32 without
torch.compile (5-12 s per PE there, as long as its training), 30 steps per PE.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from posbench.config import RunConfig, load_config
from posbench.config_loader import nested
from posbench.data.doc_corpus import build as build_corpus
from posbench.data.layout import DataLayout
from posbench.data.loader import split_shards
from posbench.data.tasks.filler import GeneratedFiller
from posbench.errors import ConfigError, DataError
from posbench.evaluation import eval_runner
from posbench.evaluation.eval_config import load_eval_config
from posbench.gpucheck import common
from posbench.gpucheck.args import check_names
from posbench.gpucheck.common import Budget, ModeResult, Report
from posbench.model.flops import model_stats
from posbench.pe import PES as PE_REGISTRY
from posbench.presets import preset_names
from posbench.training.batch_sources import build_stream
from posbench.training.loop import train
from posbench.training.memory_model import peak_bytes
from posbench.training.plan import loss_chunk_tokens

PES = ["rope", "alibi", "none", "fox", "rnope_swa"]
MAKE = "python scripts/make_gpu_corpus.py"
CORPUS, DATA_CONFIG = "data/gpu_corpus", "configs/data/gpu_corpus.yaml"
MICRO_STEPS = 2  # per optimizer step: enough steps in a short run, per-step costs (AdamW, logging) amortised
RATE_SKIP = 2  # logged steps left out of a rate: the first compiles, the second still warms up
MULTIPLES = (1, 2, 4, 8)  # perplexity lengths, x the training length; long-context families at the first two
# held back per real run, a share of its probe's cold compile: if CUDA guards rejected the probe's graph (the CPU's
# did not), the recompile would hit inductor's caches, about a fifth of a cold compile
RECOMPILE_SHARE = 0.2
MIN_STEPS = 10  # fewer leave no room for a warmup and a decay


@dataclass(frozen=True)
class Scale:
    """What the GPU run and the CPU dry run do differently; everything else is one code path."""

    probe_steps: int
    eval_s: float  # evaluation time reserved per PE on SDPA
    flex_eval_s: float  # ... and on FlexAttention, which compiles once per perplexity length
    reserve_s: float  # kept back for tables, JSON and the process's exit
    ppl_tokens: int  # scored per length and protocol
    lc_samples: int  # prompts per long-context cell
    max_steps: int = 0  # 0: as many as the budget fits


# eval_s: measured on the H100 (tiny, these settings): RoPE's evaluation took 38 s, ALiBi's 103 s (flex compiles
# for each of the 4 perplexity lengths; decoding runs it uncompiled). pretrain.json's eval rows hold the times.
GPU = Scale(probe_steps=8, eval_s=40.0, flex_eval_s=105.0, reserve_s=15.0, ppl_tokens=65_536, lc_samples=4)
DRY = Scale(probe_steps=4, eval_s=4.0, flex_eval_s=4.0, reserve_s=3.0, ppl_tokens=4_096, lc_samples=2, max_steps=30)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", default="", help=f"pretrain: the carried corpus, its data.root (default {CORPUS}, "
                   f"built by `{MAKE}`; the dry run builds a toy one unless this or --data-config is given)")
    p.add_argument("--data-config", default="", help=f"pretrain: the corpus's data config (default {DATA_CONFIG})")
    p.add_argument("--pretrain-pes", nargs="+", default=PES, help="pretrain: PEs trained on the same tokens")
    p.add_argument("--pretrain-size", default="tiny", help="pretrain: model preset (the dry run: nano at 256 tokens)")
    p.add_argument("--pretrain-steps", type=int, default=0,
                   help="pretrain: optimizer steps per PE instead of what the budget fits (0): with the same seed, "
                        "calls that train different PEs then train them on the same tokens in the same order")
    p.add_argument("--pretrain-seed", type=int, default=0,
                   help="pretrain: the seed of every PE's run (weights and data order; one call per seed)")


def check_args(args) -> None:
    """Before any work (gpucheck/args.py): the PEs registered, the size a model preset, the steps enough for a
    schedule."""
    check_names("--pretrain-pes", args.pretrain_pes, PE_REGISTRY.names())
    check_names("--pretrain-size", [args.pretrain_size], preset_names("model"))
    if args.pretrain_steps and args.pretrain_steps < MIN_STEPS:
        raise ConfigError(f"--pretrain-steps {args.pretrain_steps}: give at least {MIN_STEPS} (a warmup and a decay "
                          "need room), or 0 for what the budget fits")


def default_budget_s(dry_run: bool) -> float:
    return 90.0 if dry_run else 540.0


# ------------------------------------------------------------------------------------------------ sizing


def fit_steps(left_s: float, rates: dict[str, float], startup_s: dict[str, float], eval_s: dict[str, float],
              reserve_s: float, step_tokens: int, max_steps: int = 0) -> int:
    """Optimizer steps per PE (the same for every PE) such that training each PE at its measured tokens/s, plus
    each PE's set-up and evaluation and the reserve, ends within `left_s`; at most `max_steps` when > 0."""
    spare_s = left_s - reserve_s - sum(startup_s.values()) - sum(eval_s[pe] for pe in rates)
    seconds_per_token = sum(1.0 / r for r in rates.values())  # one token through every PE
    steps = max(0, math.floor(spare_s / seconds_per_token / step_tokens))
    return min(steps, max_steps) if max_steps else steps


def timing(rows: list[dict], wall_s: float, skip: int = RATE_SKIP) -> dict:
    """From the metrics.jsonl rows of a run logged every step: tokens/s (the median rate after `skip` steps),
    compile seconds (the first `skip` steps' time beyond steady steps) and set-up seconds (the wall time outside
    the logged steps: the model, the data, the checkpoint)."""
    tokens = np.diff([0] + [r["tokens"] for r in rows])
    seconds = tokens / np.array([r["tokens_per_s"] for r in rows])
    steady = statistics.median(r["tokens_per_s"] for r in rows[skip:])
    mfus = [r["mfu"] for r in rows[skip:] if "mfu" in r]  # none on a CPU or a GPU without a known peak
    return {"tok_s": steady, "mfu": statistics.median(mfus) if mfus else None,
            "compile_s": max(0.0, float(seconds[:skip].sum() - tokens[:skip].sum() / steady)),
            "setup_s": max(0.0, wall_s - float(seconds.sum()))}


# ------------------------------------------------------------------------------------------------ the runs


def check_corpus(corpus: Path, data_config: Path) -> None:
    """DataError (exit 2) unless `corpus`, as data.root of `data_config`, holds its tokenizer and train and val
    shards: checked before any GPU work."""
    hint = f"build it with `{MAKE}` (the folder then travels to the GPU machine)"
    if not data_config.is_file():
        raise DataError(f"pretrain: no data config {data_config}; {hint}")
    if not corpus.is_dir():
        raise DataError(f"pretrain: no corpus folder {corpus}; {hint}")
    data = load_config([data_config], [nested("data.root", str(corpus))]).data
    layout = DataLayout.from_config(data)
    try:
        layout.tokenizer.build()
        for split in ("train", "val"):
            split_shards(layout, data.splits, split)
    except (DataError, OSError) as e:
        raise DataError(f"pretrain: {corpus} does not hold {data_config}'s corpus ({e}); {hint}") from None


def pe_settings(pe: str, seq_len: int, n_layers: int) -> dict:
    if pe == "rnope_swa":  # the paper's window (4096) never binds at 1,024 tokens; half the training length does
        return {"pe.window": seq_len // 2, "pe.swa_layers": min(3, n_layers - 1)}
    return {}


@dataclass(frozen=True)
class Setup:
    """Where every run reads and writes, and at which size; `config` is one PE's run config."""

    corpus: Path
    data_config: Path
    runs: Path  # checkpoints, in a scratch folder outside the repository
    cuda: bool
    size: str
    seed: int = 0  # every PE's: its weights' init (seed) and the training windows' order (data.loader.seed)

    def load(self, pe: str, settings: dict) -> RunConfig:
        toy = {} if self.cuda else {"model.seq_len": 256, "train.micro_batch": 4}  # vocab: the data config's
        return load_config([self.data_config], [nested(k, v) for k, v in {**toy, **settings}.items()],
                           model_size=self.size if self.cuda else "nano", pe_type=pe)

    def config(self, pe: str, name: str, steps: int, max_steps: int = 0) -> RunConfig:
        base = self.load("none", {})  # the preset's sizes, before any PE checks them (rnope_swa's layers)
        step_tokens = MICRO_STEPS * base.train.micro_batch * base.model.seq_len
        return self.load(pe, {
            "seed": self.seed, "data.loader.seed": self.seed, "data.root": str(self.corpus),
            "logging.wandb": "disabled",
            # the dry run: fp32 without compile (5-12 s per PE on a CPU, as long as its training)
            "train.device": "cuda" if self.cuda else "cpu", "train.compile": self.cuda,
            "train.precision": "bf16" if self.cuda else "fp32", "train.out_dir": str(self.runs),
            "train.run_name": name, "train.budget_unit": "tokens", "train.target_budgets": [float(step_tokens * steps)],
            "train.global_batch_tokens": step_tokens, "train.max_steps": max_steps,
            # every step logs: one compiled graph (log steps ask for logit moments, a second graph) and a rate per step
            "train.log_interval": 1, "train.eval_interval": 0, "train.ckpt_interval": 0, "train.keep_best": False,
            "schedule.warmup_tokens": 0, "schedule.warmup_frac": 0.05, "schedule.decay_frac": 0.2,
            **pe_settings(pe, base.model.seq_len, base.model.n_layers)})


def kernel_of(cfg: RunConfig) -> str:
    return "+".join(sorted(set(model_stats(cfg.model, cfg.pe, cfg.train.device).kernels)))


def probe(setup: Setup, pe: str, source, steps: int) -> dict:
    """`steps` steps of `pe` through the loop: its `timing` and peak memory (CUDA) against
    training/memory_model.py's prediction; the checkpoint is deleted."""
    cfg = setup.config(pe, f"probe_{pe}", 100 * steps, max_steps=steps)
    if setup.cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    out = train(cfg, source)
    measured = timing(common.logged_rows(out["run_dir"], "tokens_per_s"), time.perf_counter() - t0)
    shutil.rmtree(out["run_dir"], ignore_errors=True)
    chunk = loss_chunk_tokens(cfg)
    model_gb = peak_bytes(cfg, cfg.train.micro_batch, chunk).total / 1e9
    mem_gb = torch.cuda.max_memory_allocated() / 1e9 if setup.cuda else None
    return {"kernel": kernel_of(cfg), **measured, "mem_gb": mem_gb, "model_gb": model_gb}


def train_pe(setup: Setup, pe: str, source, steps: int, train_tokens: int) -> dict:
    cfg = setup.config(pe, pe, steps)
    t0 = time.perf_counter()
    out = train(cfg, source)
    rows = common.logged_rows(out["run_dir"], "tokens_per_s")
    return {"run_dir": out["run_dir"], "tokens": out["tokens"], "steps": out["step"],
            "epochs": out["tokens"] / train_tokens, **timing(rows, time.perf_counter() - t0),
            "first_loss": rows[0]["loss"], "loss": rows[-1]["loss"], "vocab": cfg.model.vocab_size}


def eval_config(scale: Scale, train_len: int, device: torch.device, val_tokens: int):
    lengths = [m * train_len for m in MULTIPLES]
    return load_eval_config(overrides=[nested(k, v) for k, v in {
        "suites": ["ppl", "long_context"], "lengths": lengths, "device": device.type, "progress": False,
        "batch_size": 1,  # one shape per length: FlexAttention compiles once per shape on CUDA
        "ppl.max_tokens": min(scale.ppl_tokens, val_tokens - 1), "long_context.lengths": lengths[:2],
        "long_context.n_samples": scale.lc_samples, "long_context.depths": [0.5]}.items()])


def evaluate(run_dir: str, pe: str, cfg, device: torch.device, results: Report) -> dict:
    """The table's figures of one checkpoint; eval.py's whole results go to `results`."""
    common.fresh_compile()  # the last checkpoint's flex shapes go
    # FlexAttention compiles per shape (dynamic=False): the perplexity lengths compile (one shape each at batch 1),
    # then decoding's new shape per token runs flex eagerly, which bounds the compile time of a bias PE
    with torch._dynamo.config.patch(recompile_limit=len(MULTIPLES)):
        payload = eval_runner.evaluate(eval_runner.plan([run_dir], cfg, device)[0], cfg, device)
    results.add("checkpoints", {"pe": pe, **payload})
    ppl, lc = payload["suites"]["ppl"], payload["suites"]["long_context"]
    L, row = ppl["train_len"], {}
    for r in ppl["rows"]:
        for name in ppl["protocols"]:
            row[f"{name}_{r['length'] // L}x"] = (r[name] or {}).get("ppl")
        if r["length"] == L:
            row["val_loss"] = (r["nonoverlap"] or {}).get("loss")
    for m in MULTIPLES[:2]:
        row[f"lc_{m}x"] = lc["mean"]["by_length"].get(str(m * L))
    return row


# ------------------------------------------------------------------------------------------------ the mode

TOY_VOCAB = 384  # generated sentences support ~420 BPE tokens (the trainer refuses a larger vocabulary)


def toy_corpus(folder: Path) -> tuple[Path, Path]:
    """(corpus, data config) of the dry run, made by make_gpu_corpus.py's builder from toy documentation: text files
    of generated sentences, a BPE of TOY_VOCAB, uint16 shards. The jsonl text is deleted, as it stays behind when
    the corpus travels to the GPU machine."""
    docs = folder / "docs"
    docs.mkdir(parents=True)
    filler, rng = GeneratedFiller(), np.random.default_rng(0)
    for i in range(8):  # ~400 KB: 8% validation holds the 8x perplexity windows
        paragraphs = (" ".join(filler.words(rng, 60)) for _ in range(120))
        (docs / f"page_{i}.txt").write_text("\n\n".join(paragraphs) + "\n")
    corpus, config = folder / "corpus", folder / "toy.yaml"
    build_corpus([docs], corpus, folder / "text", TOY_VOCAB, config_path=config, val_share=0.08,
                 filler_share=0.04, workers=1, log=lambda *_: None)
    shutil.rmtree(folder / "text")
    return corpus, config


def prepare(args, scratch: Path) -> Setup:
    """The corpus (a toy one built here on a dry run without --corpus or --data-config), checked."""
    if args.dry_run and not (args.corpus or args.data_config):
        corpus, data_config = toy_corpus(scratch / "toy")
    else:
        corpus, data_config = Path(args.corpus or CORPUS), Path(args.data_config or DATA_CONFIG)
    check_corpus(corpus, data_config)
    return Setup(corpus, data_config, scratch / "runs", not args.dry_run, args.pretrain_size, args.pretrain_seed)


def size(report: Report, first: RunConfig, source, scale: Scale, budget: Budget, fixed_steps: int = 0) -> int:
    """Steps per PE from the probes (`fit_steps`), recorded in the JSON's meta and printed."""
    probes = {r["pe"]: r for r in report.tables.get("probe", []) if r["status"] == "ok"}
    startup = {pe: r["setup_s"] + RECOMPILE_SHARE * r["compile_s"] for pe, r in probes.items()}
    step_tokens, left = first.train.global_batch_tokens, budget.left()
    train_tokens = source.train.n_windows * first.model.seq_len  # windows never cross shards
    evals = {pe: eval_seconds(scale, r["kernel"]) for pe, r in probes.items()}
    steps = fit_steps(left, {pe: r["tok_s"] for pe, r in probes.items()}, startup, evals, scale.reserve_s,
                      step_tokens, scale.max_steps) if probes else 0
    steps = fixed_steps or steps  # --pretrain-steps: the user's, whatever the budget (its rows still skip)
    # what MIN_STEPS would have needed from the start of the run: the figure a too-short budget's rows name
    short_s = sum(startup.values()) + sum(evals.values()) + scale.reserve_s + budget.elapsed() + \
        MIN_STEPS * step_tokens * sum(1.0 / r["tok_s"] for r in probes.values())
    report.meta["sizing"] = {"left_s": left, "steps": steps, "step_tokens": step_tokens, "min_budget_s": short_s,
                             "tokens_per_pe": steps * step_tokens, "train_tokens": train_tokens,
                             "epochs": steps * step_tokens / train_tokens, "startup_s": startup,
                             "eval_s": evals, "reserve_s": scale.reserve_s}
    report.save()
    rates = "; ".join(f"{pe} {r['tok_s']:,.0f} tok/s, MFU {common.fmt(r['mfu'], '.1%')}, "
                      f"compile {r['compile_s']:.0f} s" for pe, r in probes.items())
    print(f"[pretrain] sizing: {left:.0f} s left, {sum(evals.values()):.0f} s of evaluation; {rates} -> {steps} "
          f"steps x {step_tokens:,} = {steps * step_tokens:,} tokens per PE, {steps * step_tokens / train_tokens:.2f} "
          f"epochs of the train split ({train_tokens:,} tokens)", flush=True)
    return steps


def eval_seconds(scale: Scale, kernel: str) -> float:
    return scale.flex_eval_s if "flex" in kernel else scale.eval_s


def train_all(report: Report, setup: Setup, first: RunConfig, source, scale: Scale, budget: Budget,
              fixed_steps: int = 0) -> None:
    """Probe every PE, size the one token budget, train every PE on it."""
    pes = report.meta["pes"]
    for pe in pes:
        need = max([r["wall_s"] for r in report.tables.get("probe", [])], default=0.0)
        report.attempt("probe", {"pe": pe}, lambda p=pe: probe(setup, p, source, scale.probe_steps), budget, need)
    steps = size(report, first, source, scale, budget, fixed_steps)
    probes, sizing = {r["pe"]: r for r in report.tables["probe"]}, report.meta["sizing"]
    for pe in pes:
        if probes[pe]["status"] != "ok" or steps < MIN_STEPS:
            why = "no probe" if probes[pe]["status"] != "ok" else (
                f"the budget fits {steps} steps (< {MIN_STEPS}): give --budget-s {sizing['min_budget_s']:.0f} or more, "
                "or fewer --pretrain-pes")
            report.add("train", {"pe": pe, "status": "skipped", "error": why})
            continue
        need = sizing["tokens_per_pe"] / probes[pe]["tok_s"] + sizing["startup_s"][pe]
        report.attempt("train", {"pe": pe}, lambda p=pe: train_pe(setup, p, source, steps, sizing["train_tokens"]),
                       budget, need)


def run(args, budget: Budget, out: Path | None) -> ModeResult:
    device = torch.device("cpu" if args.dry_run else "cuda")
    scale, pes = DRY if args.dry_run else GPU, list(args.pretrain_pes)
    check_args(args)
    env = common.environment(device)
    report = Report("pretrain", out, meta={"env": env, "dry_run": args.dry_run, "pes": pes,
                                                 "seed": args.pretrain_seed})
    results = Report("pretrain_eval", out)  # eval.py's results per checkpoint, beside the table's figures
    with tempfile.TemporaryDirectory(prefix="posbench_pretrain_") as tmp:
        setup = prepare(args, Path(tmp))
        first, *_ = [setup.config(pe, pe, 1) for pe in pes]  # every PE's config checked before any work
        source = build_stream(first)  # one source for every PE: the same windows in the same order
        common.fresh_compile()  # once: a real run reuses its probe's graph (one graph per PE in dynamo's cache)
        train_all(report, setup, first, source, scale, budget, args.pretrain_steps)
        cfg = eval_config(scale, first.model.seq_len, device, sum(len(t) for t in source.val.tokens))
        kernels = {r["pe"]: r.get("kernel", "") for r in report.tables["probe"]}
        for r in [r for r in report.tables["train"] if r["status"] == "ok"]:
            report.attempt("eval", {"pe": r["pe"]}, lambda r=r: evaluate(r["run_dir"], r["pe"], cfg, device, results),
                           budget, eval_seconds(scale, kernels[r["pe"]]))
    return ModeResult([table(report, pes, device)], common.failed_rows(report))


def merged(report: Report, pe: str) -> dict:
    """One PE's probe, train and eval rows as one table row; the first that did not finish says why."""
    row: dict = {"pe": pe, "wall_s": 0.0, "status": "ok"}
    for part in ("probe", "train", "eval"):
        got = next((r for r in report.tables.get(part, []) if r["pe"] == pe), None)
        if got is None:
            continue
        row.update({k: v for k, v in got.items() if k not in ("status", "error", "wall_s")})  # train's rate last
        row["wall_s"] += got.get("wall_s", 0.0)
        if got["status"] != "ok" and row["status"] == "ok":
            row["status"], row["error"] = got["status"], f"{part}: {got.get('error', '')}"
    return row


def table(report: Report, pes: list[str], device: torch.device) -> str:
    sizing = report.meta.get("sizing", {})
    ppl = [(f"{name}_{m}x", f"ppl {short} {m}x", ".2f") for name, short in (("nonoverlap", "no"), ("sliding", "sw"))
           for m in MULTIPLES]
    title = (f"Pretraining, {'dry run (nano at 256 tokens, fp32)' if report.meta['dry_run'] else 'compiled bf16'}: "
             f"{sizing.get('tokens_per_pe', 0):,} tokens per PE, {sizing.get('epochs', 0):.2f} epochs, "
             f"{report.meta['env'].get('gpu', device.type)} (ppl: no = non-overlapping, sw = sliding window)")
    return common.markdown_table(title, [merged(report, pe) for pe in pes], [
        ("pe", "PE", ""), ("kernel", "kernel", ""), ("tokens", "tokens", ",d"), ("steps", "steps", ""),
        ("tok_s", "tok/s", ",.0f"), ("mfu", "MFU", ".1%"), ("mem_gb", "peak GB", ".1f"),
        ("model_gb", "model GB", ".1f"), ("loss", "train loss", ".3f"),
        ("val_loss", "val loss", ".3f"), *ppl, ("lc_1x", "LC 1x", ".1%"), ("lc_2x", "LC 2x", ".1%"),
        ("wall_s", "wall s", ".0f")])
