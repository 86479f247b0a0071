"""eval.py's work, readable top to bottom: plan every checkpoint, then evaluate them one at a time.

    plan     each checkpoint checked (config, weights, shapes; on the meta device, no memory), its
             tokenizer built, --rope-scaling checked against its PE, its lengths checked against the
             device's memory (evaluation/lengths.py), every suite constructed (data loaded): any error
             names the checkpoint or file before the first model runs
    run      per checkpoint: load weights, apply RoPE scaling, run the suites under one progress bar,
             write results.json + summary.md + plots
    compare  for several checkpoints: one comparison summary and shared plots
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch
from tqdm import tqdm

from posbench.config_loader import to_dict
from posbench.data.layout import DataLayout
from posbench.errors import ConfigError, DataError, user_paths
from posbench.evaluation import eval_report, protocol
from posbench.evaluation.dope import Dope, NoDope, check_dope
from posbench.evaluation.eval_config import EvalConfig
from posbench.evaluation.evaluator import Evaluator, Session, Target
from posbench.evaluation.lengths import Footprint, check_fits
from posbench.evaluation.loading import inspect_checkpoint, load_model
from posbench.evaluation.retrieval import RetrievalGrid
from posbench.evaluation.scaling import apply_rope_scaling, check_rope_scaling
from posbench.evaluation.suites import get_suite
from posbench.fileio import no_link_below
from posbench.threads import choose_threads
from posbench.training.checkpoint import read_meta
from posbench.training.device import choose_precision, pick_device


@dataclass
class Planned:
    target: Target
    evaluators: list[Evaluator]
    given: str = ""  # the path as the user gave it: a run directory re-resolves to its newest step when pruned


def choose_device(requested: str) -> torch.device:
    return torch.device(pick_device(requested, "--device cuda: no CUDA device is visible (use --device cpu)"))


def _overrides(cfg: EvalConfig) -> dict | None:
    return {"data": {"root": cfg.data_root}} if cfg.data_root else None


def labels_for(step_dirs: list[Path]) -> list[str]:
    """The run directory's name; with its step where two checkpoints share a run; unique either way."""
    runs = [p.parent.name for p in step_dirs]
    labels = [f"{r}-{p.name}" if runs.count(r) > 1 else r for r, p in zip(runs, step_dirs, strict=True)]
    return [f"{lab}-{i}" if labels.count(lab) > 1 else lab for i, lab in enumerate(labels)]


def trained_tokenizer(step_dir: Path) -> str:
    """The fingerprint of the tokenizer the checkpoint was trained with: in full from its meta.json, or
    (checkpoints written before that) the 16 hex digits its data fingerprint `shards-<16>-...` holds;
    "" when it trained on no text (task or random rows)."""
    meta = read_meta(step_dir) or {}
    if "tokenizer_fingerprint" in meta:
        return meta["tokenizer_fingerprint"]
    data = str((meta.get("identity") or {}).get("data", ""))
    return data.split("-")[1] if data.startswith("shards-") else ""


def check_tokenizer(path: str, step_dir: Path, built: str, allow: bool) -> None:
    """Refuse to evaluate with another tokenizer than the checkpoint's: after a retrained BPE the same
    text becomes other ids, and every score would silently measure that instead."""
    trained = trained_tokenizer(step_dir)
    if trained and not built.startswith(trained) and not allow:
        raise DataError(f"{path}: this checkpoint was trained with tokenizer {trained[:16]} but the tokenizer "
                        f"files there now give {built[:16]} (retrained or replaced since?). Point --data-root "
                        "at the data it was trained with, or pass --allow-tokenizer-mismatch to evaluate anyway")


def footprint(name: str, cfg: EvalConfig, target: Target, meta_model, device: torch.device) -> Footprint:
    """What suite `name` holds at a length on `device` (evaluation/lengths.py): the weights, and one forward of its
    rows through the kernels the model would pick there (Mamba has no PE: no attention)."""
    suite = get_suite(name)
    elem = 2 if choose_precision(cfg.precision, device.type).name == "bf16" else 4
    weights = sum(p.numel() * p.element_size() for p in meta_model.parameters())
    generates = issubclass(suite, RetrievalGrid) or getattr(suite, "generates", False)
    pe = getattr(meta_model, "pe", None)
    options = cfg.suite_config(name)
    attention_layers = target.run_cfg.model.n_layers if pe is not None else 0
    return Footprint(target.run_cfg.model, pe, device.type, weights,
                     lambda L: suite.forward_rows(options, target, L), generates, elem,
                     lambda L: suite.held_bytes(options, target, L, attention_layers))


def plan(paths: list[str], cfg: EvalConfig, device: torch.device) -> list[Planned]:
    inspected = [inspect_checkpoint(p, _overrides(cfg)) for p in paths]
    planned = []
    for path, label, (step_dir, run_cfg, meta_model) in zip(paths, labels_for([i[0] for i in inspected]),
                                                            inspected, strict=True):
        check_rope_scaling(meta_model, cfg.rope_scaling, str(path))
        check_dope(meta_model, cfg.dope, str(path))
        if run_cfg.model.arch.not_a_language_model:
            raise ConfigError(f"{path}: eval.py scores language models; this checkpoint's model.arch is "
                              f"`{run_cfg.model.arch.name}`: {run_cfg.model.arch.not_a_language_model}")
        try:
            tokenizer = DataLayout.from_config(run_cfg.data).tokenizer.build()
        except DataError as e:
            raise DataError(f"{path}: cannot build the checkpoint's tokenizer `{run_cfg.data.tokenizer.name}`: {e}"
                            " (run from the directory it was trained in, or pass --data-root)") from None
        check_tokenizer(path, step_dir, tokenizer.fingerprint, cfg.allow_tokenizer_mismatch)
        if tokenizer.vocab_size > run_cfg.model.vocab_size:
            raise ConfigError(f"{path}: tokenizer `{tokenizer.name}` has {tokenizer.vocab_size} ids but the model "
                              f"only {run_cfg.model.vocab_size}; this checkpoint was not trained on this tokenizer")
        target = Target(label, step_dir, run_cfg, tokenizer, cfg.lengths_for(run_cfg.model.seq_len), cfg.seed,
                        cfg.batch_size, meta_model.pe.max_positions)
        for name in cfg.suite_list():  # before any suite builds its prompts
            lengths = getattr(cfg.suite_config(name), "lengths", None) or target.lengths
            check_fits(f"{path} (--suite {name})", lengths, footprint(name, cfg, target, meta_model, device), device)
        planned.append(Planned(target, [get_suite(n)(cfg.suite_config(n), target) for n in cfg.suite_list()],
                               str(path)))
    return planned


def evaluate(p: Planned, cfg: EvalConfig, device: torch.device) -> dict:
    t = p.target
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    # a training run still writing prunes old steps (train.keep_last): the step planned may be gone by now, and
    # the path as given then means the run's newest (a run dir, `latest`), or an error naming it (exit 4)
    loaded = load_model(t.path if t.path.exists() else p.given, device, _overrides(cfg))
    trained_scaling = apply_rope_scaling(loaded.model, cfg.rope_scaling, str(t.path))
    precision = choose_precision(cfg.precision, device.type)
    results = {}
    with tqdm(total=sum(e.work() for e in p.evaluators), desc=t.label, unit="item", disable=not cfg.progress,
              mininterval=1.0, dynamic_ncols=True) as bar:
        dope = NoDope() if cfg.dope is None else Dope(cfg.dope, t.train_len, t.batch_size, precision.autocast)
        session = Session(loaded.model, device, precision.autocast, bar, dope)
        for evaluator in p.evaluators:
            bar.set_postfix_str(evaluator.name)
            results[evaluator.name] = evaluator.run(session)
    meta, loaded_path = loaded.meta, loaded.path
    items = protocol.eval_items(t.run_cfg, sum(p.numel() for p in loaded.model.parameters()), t.lengths,
                                str(device), precision.name)
    del loaded, session
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"label": t.label, "checkpoint": str(loaded_path), "step": meta.get("step"), "tokens": meta.get("tokens"),
            "config": to_dict(t.run_cfg), "eval_config": to_dict(cfg), "code_version": eval_report.code_version(),
            "device": str(device), "precision": precision.name, "threads": torch.get_num_threads(),
            "lengths": t.lengths,
            "rope_scaling": to_dict(cfg.rope_scaling) if cfg.rope_scaling else None,
            "rope_scaling_as_trained": trained_scaling,
            # the heads DoPE chose at each suite and length, with every head's score (evaluation/dope.py)
            "dope": to_dict(cfg.dope) if cfg.dope else None, "dope_heads": dope.records, "started": started,
            "elapsed_s": time.perf_counter() - t0, "protocol": [list(i) for i in items], "suites": results}


def default_out(planned: list[Planned]) -> Path:
    if len(planned) == 1:
        # <run>/eval/<step>/: next to the weights it describes, but not inside the step dir, which a
        # re-run's save of the same step replaces
        step_dir = planned[0].target.path
        return step_dir.parent / "eval" / step_dir.name
    return Path("runs") / f"eval_{datetime.now().strftime('%Y%m%d_%H%M%S')}"


def run_eval(paths: list[str], cfg: EvalConfig, out: str | Path | None = None, log=print) -> dict:
    """Evaluate checkpoints; returns {"out": dir, "checkpoints": {label: written files}, "comparison": ...}."""
    if not paths:
        raise ConfigError("no checkpoint given: posbench eval CKPT [CKPT ...]")
    device = choose_device(cfg.device)
    torch.set_num_threads(choose_threads(cfg.threads)[0])  # a setting, never the load (posbench/threads.py)
    planned = plan(paths, cfg, device)
    out_dir = Path(out) if out else default_out(planned)
    # --out is the user's and may be a link; what we create below it, or below the checkpoint's run directory
    # (eval/<step>/), must not be one (fileio's module doc): checked before any evaluation runs
    root = out_dir if out or len(planned) > 1 else planned[0].target.path.parent
    ckpt_dirs = [out_dir if len(planned) == 1 else out_dir / p.target.label for p in planned]
    with user_paths():
        for ckpt_dir in ckpt_dirs:
            no_link_below(root, ckpt_dir)
    written, payloads = {}, []
    for p, ckpt_dir in zip(planned, ckpt_dirs):
        payload = evaluate(p, cfg, device)
        payloads.append(payload)
        with user_paths():  # --out (or the checkpoint's run directory) is the user's
            written[p.target.label] = eval_report.write_checkpoint_report(payload, ckpt_dir)
        log(f"{p.target.label}: wrote {ckpt_dir / 'results.json'} and {ckpt_dir / 'summary.md'}")
    with user_paths():
        comparison = eval_report.write_comparison(payloads, out_dir) if len(planned) > 1 else None
    if comparison:
        log(f"comparison of {len(planned)} checkpoints: {comparison['summary']}")
    return {"out": out_dir, "checkpoints": written, "comparison": comparison}
