"""Fingerprint what training and evaluation compute, to show a refactor changes nothing.

Run it on the commit before a refactor and on the one after, then compare:

    python scripts/fingerprint_behaviour.py --out before.json            # on the old tree
    python scripts/fingerprint_behaviour.py --out after.json             # on the new tree
    python scripts/fingerprint_behaviour.py --compare before.json after.json   # exit 1 on any difference

Every value is a sha256 of exact bytes (weights, logits, greedy tokens, metrics rows without wall-clock fields), so
"the same" means bit-identical, never "close". Cases:
  train/<case>  train.py on random tokens (nano, 64-token windows, dropout 0.1, two budgets so the branch
                checkpoint is written, validation every 4 steps): final weights, every metrics row, meta.json.
                One case per registered PE, plus the chunked and full loss, Mamba, DroPE across
                its drop, stop-and-resume, and (--torchrun) 2-process DDP and FSDP with gloo.
  eval/<pe>     a seeded nano model per PE: logits at 600 tokens through every kernel that runs it on this device
                (eager, sdpa, sdpa_bias: the blocked and far-field paths), with and without grad, its gradient,
                and cached greedy decoding (tokens and every step's logits).
  study/<preset> the quickstart and quickstart_arch studies' smoke cells (task cells end to end, the
                encoder-decoder and Mamba among them): every cell's results.
`--only` takes name prefixes (e.g. `--only eval/ train/pe_rope`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

TRAIN = ["--model-size", "nano", "model.seq_len=64", "train.stream=random", "train.budget_unit=tokens",
         "train.target_budgets=[8192,16384]", "train.global_batch_tokens=512", "train.micro_batch=2",
         "train.log_interval=1", "train.eval_interval=4", "train.eval_batches=2", "train.ckpt_interval=8",
         "logging.wandb=disabled", "schedule.warmup_tokens=1024", "model.dropout=0.1", "optim.lr=3e-3",
         "train.threads=1"]
# wall-clock and machine readings: everything else in a metrics row or meta.json must match to the bit
# PEs whose defaults need more than nano's 2 layers (a 4-entry layer pattern, 3 windowed layers and a full one)
PE_EXTRA = {"hybrid": ["model.n_layers=4"], "rnope_swa": ["model.n_layers=4"]}
VOLATILE = {"tokens_per_s", "eta_s", "mfu", "peak_mem_gib", "peak_reserved_gib", "time", "wall_s", "created",
            "run_dir", "checkpoint", "path", "host", "hostname", "started", "elapsed_s",
            "git"}  # provenance: the commit differs between the trees being compared, by design


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def tensor_sha(t: torch.Tensor) -> str:
    return sha(t.detach().cpu().contiguous().float().numpy().tobytes() if t.is_floating_point()
               else t.detach().cpu().contiguous().numpy().tobytes())


def state_sha(state: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(tensor_sha(state[name]).encode())
    return h.hexdigest()[:16]


def scrub(obj):
    """A metrics row or meta.json without wall-clock and path fields (they differ between any two runs)."""
    if isinstance(obj, dict):
        return {k: scrub(v) for k, v in sorted(obj.items()) if k not in VOLATILE and not k.endswith("_gib")}
    if isinstance(obj, list):
        return [scrub(v) for v in obj]
    return obj


def run_dir_fingerprint(run_dir: Path) -> dict:
    rows = [scrub(json.loads(line)) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if "message" not in line]
    final = sorted(p for p in run_dir.iterdir() if p.name.startswith("step_"))[-1]
    state = torch.load(final / "model.pt", weights_only=True, map_location="cpu")
    meta = scrub(json.loads((final / "meta.json").read_text()))
    for key in ("identity", "data_content", "parent"):
        meta.pop(key, None)
    return {"weights": state_sha(state), "metrics": sha(json.dumps(rows, sort_keys=True).encode()),
            "n_rows": len(rows), "meta": sha(json.dumps(meta, sort_keys=True).encode()), "step": final.name}


def env() -> dict:
    e = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
         "PYTHONPATH": str(ROOT / "src")}
    e.pop("POSBENCH_INJECT_NAN", None)
    return e


def train_py(out: Path, args: list[str], nproc: int = 1) -> Path:
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
                if nproc > 1 else [sys.executable])
    cmd = [*launcher, str(ROOT / "train.py"), *TRAIN, f"train.out_dir={out}", "train.run_name=run", *args]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env(), timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {(p.stdout + p.stderr)[-2000:]}")
    return out / "run"


def train_case(args: list[str], nproc: int = 1, resume_after: int = 0) -> Callable[[Path], dict]:
    def run(tmp: Path) -> dict:
        if resume_after:
            train_py(tmp, [*args, f"train.max_steps={resume_after}"], nproc)
            return run_dir_fingerprint(train_py(tmp, [*args, "train.resume=auto"], nproc))
        return run_dir_fingerprint(train_py(tmp, args, nproc))
    return run


def no_grad_logits(model, x) -> str:
    model.eval()
    with torch.no_grad():
        return tensor_sha(model(x).logits)


def grads(model, x) -> str:
    model.train()
    model.zero_grad(set_to_none=True)
    logits = model(x[:, :130]).logits
    logits.float().pow(2).mean().backward()
    model.eval()
    return sha(tensor_sha(logits).encode()
               + state_sha({n: p.grad for n, p in model.named_parameters() if p.grad is not None}).encode())


def cached(model, x) -> str:
    from posbench.evaluation.generate import greedy_cached, supports_cache

    model.eval()
    if not supports_cache(model):
        return "no cache"
    scores: list = []
    tokens = greedy_cached(model, x[:, :20], 12, scores)
    return sha(tensor_sha(tokens).encode() + tensor_sha(torch.stack(scores)).encode())


def eval_case(pe: str) -> Callable[[Path], dict]:
    def run(tmp: Path) -> dict:
        from posbench.config import load_config
        from posbench.model.build import build_model
        from posbench.model.kernels import KERNELS

        torch.set_num_threads(1)
        out = {}
        x = torch.randint(0, 512, (2, 600), generator=torch.Generator().manual_seed(1))
        for kernel in KERNELS.names():
            try:
                cfg = load_config(model_size="nano", overrides=[f"pe.name={pe}", f"model.attention={kernel}",
                                                                 "model.seq_len=64", *PE_EXTRA.get(pe, [])])
                torch.manual_seed(0)
                model = build_model(cfg.model, cfg.pe, "cpu", 0).eval()
            except Exception as e:  # the kernel refuses this PE here: the refusal is part of the behaviour
                out[f"{kernel}/refused"] = sha(f"{type(e).__name__}: {e}".encode())
                continue
            for part, fn in (("nograd", no_grad_logits), ("grad", grads), ("cached", cached)):
                try:
                    out[f"{kernel}/{part}"] = fn(model, x)
                except Exception as e:  # e.g. flex has no backward on CPU: the same failure before and after
                    out[f"{kernel}/{part}"] = "error " + sha(f"{type(e).__name__}: {e}".encode())
        return out
    return run


def measured(results: dict) -> dict:
    """A study's results.json as the values its cells measured: the file's schema version and the fields a cell
    writes as null (n/a, at any depth: a curve point's too) left out, so a change of the file's form alone (typed cell
    results, schema 2: every field, n/a as null) is not a change of behaviour, while every measured value still counts
    to the bit."""
    def values(x):
        if isinstance(x, dict):
            return {k: values(v) for k, v in x.items() if k != "schema" and v is not None}
        return [values(v) for v in x] if isinstance(x, list) else x
    return {**results, "cells": [values(c) for c in results.get("cells", [])]}


def study_smoke(preset: str) -> Callable[[Path], dict]:
    def run(tmp: Path) -> dict:
        cmd = [sys.executable, str(ROOT / "scripts" / "study.py"), preset, "--smoke", "--seeds", "0",
               "--out", str(tmp / "study"), "--no-progress", "--workers", "1"]
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env(), timeout=900)
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: {(p.stdout + p.stderr)[-2000:]}")
        cells = json.loads((tmp / "study" / "results.json").read_text())
        return {"results": sha(json.dumps(scrub(measured(cells)), sort_keys=True).encode())}
    return run


def cases(torchrun: bool) -> dict[str, Callable[[Path], dict]]:
    from posbench.pe import PES

    out: dict[str, Callable[[Path], dict]] = {}
    for pe in PES.names():
        out[f"train/pe_{pe}"] = train_case([f"pe.name={pe}", *PE_EXTRA.get(pe, [])])
    out["train/loss_chunked_rope"] = train_case(["pe.name=rope", "train.loss=chunked", "train.loss_chunk_tokens=32"])
    out["train/loss_chunked_alibi"] = train_case(["pe.name=alibi", "train.loss=chunked",
                                                  "train.loss_chunk_tokens=32"])
    out["train/loss_full_rope"] = train_case(["pe.name=rope", "train.loss=full"])
    out["train/mamba"] = train_case(["pe.name=none", "model.arch.name=mamba", "model.arch.d_state=4"])
    out["train/drope_across_drop"] = train_case(["pe.name=drope"])
    out["train/resume_rope"] = train_case(["pe.name=rope"], resume_after=7)
    out["train/resume_fox"] = train_case(["pe.name=fox"], resume_after=7)
    if torchrun:
        out["train/ddp_rope"] = train_case(["pe.name=rope"], nproc=2)
        out["train/fsdp_alibi"] = train_case(["pe.name=alibi", "train.parallel=fsdp"], nproc=2)
    for pe in PES.names():
        out[f"eval/{pe}"] = eval_case(pe)
    out["study/quickstart"] = study_smoke("quickstart")
    out["study/quickstart_arch"] = study_smoke("quickstart_arch")  # encoder-decoder and Mamba cells on a task
    return out


def read_fingerprints(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path} does not exist; make it with --out {path}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not a fingerprint file (not JSON: {e})") from None


def compare(a: Path, b: Path) -> int:
    old, new = read_fingerprints(a), read_fingerprints(b)
    differ = 0
    for case in sorted(set(old) | set(new)):
        if case not in old or case not in new:
            print(f"{case}: only in {a if case in old else b}")
            continue
        for key in sorted(set(old[case]) | set(new[case])):
            if old[case].get(key) != new[case].get(key):
                differ += 1
                print(f"DIFFERS {case} {key}: {old[case].get(key)} -> {new[case].get(key)}")
    shared = len(set(old) & set(new))
    print(f"{shared} cases compared, {differ} values differ")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the fingerprints here (JSON)")
    ap.add_argument("--only", nargs="*", default=[], help="case name prefixes to run (default: all)")
    ap.add_argument("--torchrun", action="store_true", help="also the 2-process DDP and FSDP cases (slower)")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args(argv)
    if args.compare:
        try:
            return compare(*args.compare)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if args.out is None:
        ap.error("give --out FILE (or --compare BEFORE AFTER)")
    result = {}
    for name, fn in cases(args.torchrun).items():
        if args.only and not any(name.startswith(p) for p in args.only):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            try:
                result[name] = fn(Path(tmp))
            except Exception as e:  # a failure is a fingerprint too: the same failure before and after
                result[name] = {"error": sha(f"{type(e).__name__}".encode()), "detail": str(e)[-300:]}
        print(f"{name}: {'error ' + result[name]['detail'][-120:] if 'error' in result[name] else 'ok'}",
              flush=True)
        args.out.write_text(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
