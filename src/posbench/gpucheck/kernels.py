"""`gpu_check.py kernels`: is every attention kernel right on this device, and how fast and how big is training?

In order, each under its share of the budget (a row that no longer fits is skipped and says so):
  tests        the GPU-only tests (`pytest -m gpu`), in a subprocess with its own time limit
  correctness  per PE family and per kernel that claims the PE (`supports()` is None on this device): the
               forward without autograd (the evaluation path) and the gradients of a forward + backward (the
               training path) against the fp32 eager kernel of the same weights, as relative errors
               ||x - ref|| / ||ref||. Each kernel in fp32 (TF32 off): tolerance 1e-4 on the logits, 1e-3 on the
               worst parameter's gradient. The compiled model (torch.compile fullgraph, the kernel training
               picks) in bf16 autocast, the training path: tolerance max(2e-2, 3 x the bf16 eager model's own
               error) on the logits, max(5e-2, 3 x) on all gradients as one vector, and 3 AdamW steps against the
               same model uncompiled (losses within 2e-2 relative). KV-cache decoding against the full forward
               (fp32, 1e-4).
  resume       the real loop on this device: a run stopped and resumed from its checkpoint gives the
               uninterrupted run's per-step losses bit for bit
  throughput   the real loop (train.compile, bf16, the preset's micro-batch) per size and PE: tokens/s (median
               of the logged rates after warm-up), MFU (FLOPs per token as nanoGPT counts them, 6 N + 12 L d T)
               against the datasheet peak and against the bf16 matmul rate measured in this call, and the peak
               memory against posbench/training/memory_model.py's prediction. Sizes run smallest first, so a
               short budget drops the largest.
  profile      one step of the first throughput row's model under torch.profiler: device time by kind of kernel
               (gpucheck/profile.py)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from posbench.config import load_config
from posbench.gpucheck.common import (
    Budget,
    ModeResult,
    Report,
    environment,
    failed_rows,
    fresh_compile,
    markdown_table,
    matmul_peak,
)
from posbench.gpucheck.profile import profile_step
from posbench.model.flops import model_stats
from posbench.model.kernels import KERNELS, auto_kernel_name
from posbench.model.transformer import Transformer
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from posbench.training.memory_model import peak_bytes
from posbench.training.metrics import peak_flops
from posbench.training.plan import loss_chunk_tokens

ROOT = Path(__file__).resolve().parents[3]
DATASHEET_BF16 = 989e12  # H100 SXM dense bf16, the figure MFU is usually quoted against
# the budget's weights, in order: a part gets its weight's share of what is left when it starts, among the parts
# still to run (a skipped part leaves its time to the others)
SHARES = {"tests": 0.1, "correctness": 0.4, "resume": 0.1, "throughput": 0.35, "profile": 0.05}
TESTS_CAP_S = 60.0  # the GPU-only tests compile flex per PE: enough for them, not the whole budget
# pretrain's PEs first: their tiny rows leave inductor's cache warm for its probes (all, or a second process)
DEFAULT_PES = ["rope", "alibi", "none", "fox", "rnope_swa", "t5", "fire"]
TOL_FP32 = (1e-4, 1e-3)  # forward, gradients
TOL_BF16_FLOOR = (2e-2, 5e-2)
TOL_STEPS = 2e-2
TOL_CACHE = 1e-4


@dataclass(frozen=True)
class Case:
    """One PE setting of the correctness table; `compiled`: also the compiled model in bf16 (one per family:
    a compile costs seconds of the budget)."""

    family: str
    pe: str
    overrides: tuple[str, ...] = ()
    compiled: bool = False
    layers: int = 2
    bos: bool = False  # rows hold document starts (packing)
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.pe


def cases(T: int) -> list[Case]:
    doc = ("model.packing.mask=document", "model.packing.positions=document")
    return [
        Case("rotary", "rope", compiled=True), Case("rotary", "xpos"), Case("rotary", "modded_rope"),
        Case("added", "sinusoidal", compiled=True), Case("added", "learned"),
        Case("bias", "alibi", compiled=True), Case("bias", "t5"), Case("bias", "kerple_log"),
        Case("bias", "fire", (f"pe.threshold_init={T // 4}",), compiled=True), Case("bias", "relative_learned"),
        Case("data-dependent", "fox", compiled=True), Case("data-dependent", "cope"),
        Case("data-dependent", "pope"),
        Case("hybrid/window", "rnope_swa", layers=4, compiled=True), Case("hybrid/window", "hybrid", layers=4),
        Case("hybrid/window", "alibi", (f"model.attention_window={T // 4}",), label="alibi+window"),
        Case("packing", "rope", doc, bos=True, compiled=True, label="rope+docs"),
        Case("packing", "alibi", doc, bos=True, label="alibi+docs"),
        Case("packing", "fox", doc, bos=True, label="fox+docs"),
    ]


@dataclass
class Dims:
    d_model: int
    n_heads: int
    d_ff: int
    T: int
    vocab: int
    batch: int
    tp_rows: list[tuple[str, str]] = field(default_factory=list)  # (size, PE), smallest size first
    tp_steps: int = 30
    tp_warmup: int = 10
    # the dry run traces the same fullgraph step without inductor's code generation (tens of seconds per model
    # on a CPU): dynamo and AOTAutograd still see every PE's graph
    compile_backend: str = "inductor"


def dims_for(args) -> Dims:
    if args.dry_run:
        return Dims(32, 4, 64, 32, 61, 2, [("nano", pe) for pe in args.pes[:2]], tp_steps=6, tp_warmup=1,
                    compile_backend="aot_eager")
    return Dims(128, 4, 256, 256, 512, 2, [(s, p) for s in args.sizes for p in args.pes])


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", nargs="+", default=["tiny", "small", "medium"],
                   help="kernels: throughput sizes, smallest first (a short budget drops the last)")
    p.add_argument("--pes", nargs="+", default=DEFAULT_PES, help="kernels: throughput PEs")
    p.add_argument("--cases", nargs="*", default=None,
                   help="kernels: only the correctness cases of these PEs or labels (default: every case)")
    p.add_argument("--skip", nargs="*", default=[], choices=list(SHARES), help="kernels: parts not to run")


def default_budget_s(dry_run: bool) -> float:
    return 110.0 if dry_run else 480.0


# ---------------------------------------------------------------------------------------------- correctness


def _model(case: Case, dims: Dims, kernel: str, device: torch.device, seed_state=None) -> Transformer:
    over = ["model.size=test", f"model.d_model={dims.d_model}", f"model.n_heads={dims.n_heads}",
            f"model.d_ff={dims.d_ff}", f"model.n_layers={case.layers}", f"model.seq_len={dims.T}",
            f"model.vocab_size={dims.vocab}", f"model.attention={kernel}", *case.overrides]
    if case.bos:
        over.append(f"model.packing.bos_id={dims.vocab - 1}")
    cfg = load_config(overrides=over, pe_type=case.pe)
    torch.manual_seed(0)
    model = Transformer(cfg.model, cfg.pe, device.type, loss_chunk_tokens=0)
    if seed_state is not None:
        model.load_state_dict(seed_state)
    return model.to(device)


def _randomize_pe(model: Transformer) -> None:
    """PE tables that start at zero (T5, relative_learned, CoPE) would hide a kernel that drops the bias."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.pe.parameters():
            p.add_((torch.randn(p.shape, generator=g) * 0.3).to(p.device, p.dtype))


def _batch(case: Case, dims: Dims, device: torch.device):
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, dims.vocab - 1, (dims.batch, dims.T + 1), generator=g)
    if case.bos:  # documents of a few lengths, each row its own cut
        for b, starts in enumerate(([0, dims.T // 3, dims.T // 2 + 5], [7, dims.T // 4, 3 * dims.T // 4])):
            idx[b, starts] = dims.vocab - 1
    idx = idx.to(device)
    return idx[:, :-1], idx[:, 1:]


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


def _forward_backward(model, x, y, autocast: bool, device, eval_path: bool = True):
    """Logits without autograd (the evaluation path; with `eval_path` False those of the training forward), then
    gradients of a forward + backward (the training path)."""
    ctx = torch.autocast(device.type, dtype=torch.bfloat16) if autocast else torch.autocast(device.type,
                                                                                             enabled=False)
    model.zero_grad(set_to_none=True)
    with ctx:
        if eval_path:
            with torch.no_grad():
                logits = model(x).logits.float()
        out = model(x).logits.float()
        if not eval_path:
            logits = out.detach()
    F.cross_entropy(out.flatten(0, 1), y.flatten()).backward()
    grads = {n: p.grad.detach().float().clone() for n, p in _params(model) if p.grad is not None}
    return logits, grads


def _params(model):
    inner = getattr(model, "_orig_mod", model)
    return list(inner.named_parameters())


def grad_error(grads: dict, ref: dict, worst_parameter: bool = True) -> float:
    """The worst parameter's relative gradient error (a parameter with no gradient where the reference has one
    counts as error 1); with `worst_parameter` False, the error of all gradients as one vector (bf16: a PE's few
    parameters whose gradients bf16 rounds by a whole 100%, FIRE's MLP, would otherwise decide the row)."""
    if not worst_parameter:
        names = [n for n in ref if n in grads]
        if len(names) < len(ref):
            return 1.0
        return rel(torch.cat([grads[n].flatten() for n in names]), torch.cat([ref[n].flatten() for n in names]))
    worst = 0.0
    for name, g_ref in ref.items():
        if float(g_ref.norm()) == 0.0:
            continue
        worst = max(worst, rel(grads[name], g_ref) if name in grads else 1.0)
    return worst


def claimants(case: Case, dims: Dims, device: torch.device) -> list[str]:
    """The kernels that accept this PE on this device (eager, the reference, aside)."""
    pe = _model(case, dims, "eager", torch.device("cpu")).pe
    return [k for k in ("sdpa", "flex", "sdpa_bias", "flash_alibi")
            if KERNELS.get(k).supports(pe, device.type, 0.0) is None]


def check_kernel(case: Case, dims: Dims, kernel: str, device: torch.device) -> dict:
    with _fp32_matmuls():
        ref_model = _model(case, dims, "eager", device)
        _randomize_pe(ref_model)
        state = ref_model.state_dict()
        x, y = _batch(case, dims, device)
        ref_logits, ref_grads = _forward_backward(ref_model, x, y, False, device)
        model = _model(case, dims, kernel, device, state)
        try:
            logits, grads = _forward_backward(model, x, y, False, device)
            g_err = grad_error(grads, ref_grads)
        except Exception as e:  # noqa: BLE001  (a kernel without a backward here: its forward still counts)
            if device.type == "cpu" and kernel == "flex":
                with torch.no_grad():
                    logits, g_err = model(x).logits.float(), None
            else:
                raise e
    f_err = rel(logits, ref_logits)
    ok = f_err <= TOL_FP32[0] and (g_err is None or g_err <= TOL_FP32[1])
    return {"fwd_err": f_err, "grad_err": g_err, "tol": f"{TOL_FP32[0]:g}/{TOL_FP32[1]:g}", "pass": ok,
            "note": "no CPU backward: forward only" if g_err is None else ""}


def check_compiled(case: Case, dims: Dims, device: torch.device) -> dict:
    """The training path: the compiled model (fullgraph, the auto kernel) in bf16 against fp32 eager, then 3 AdamW
    steps against the same model uncompiled."""
    with _fp32_matmuls():
        ref_model = _model(case, dims, "eager", device)
        _randomize_pe(ref_model)
        state = ref_model.state_dict()
        x, y = _batch(case, dims, device)
        ref_logits, ref_grads = _forward_backward(ref_model, x, y, False, device, eval_path=False)
        bf_logits, bf_grads = _forward_backward(ref_model, x, y, True, device, eval_path=False)  # bf16's own rounding
    floor_f, floor_g = rel(bf_logits, ref_logits), grad_error(bf_grads, ref_grads, worst_parameter=False)
    tol_f, tol_g = max(TOL_BF16_FLOOR[0], 3 * floor_f), max(TOL_BF16_FLOOR[1], 3 * floor_g)
    fresh_compile()
    plain = _model(case, dims, "auto", device, state)
    compiled_model = _model(case, dims, "auto", device, state)
    compiled = torch.compile(compiled_model, fullgraph=True, backend=dims.compile_backend)
    t0 = time.perf_counter()
    logits, grads = _forward_backward(compiled, x, y, True, device, eval_path=False)
    compile_s = time.perf_counter() - t0
    f_err, g_err = rel(logits, ref_logits), grad_error(grads, ref_grads, worst_parameter=False)
    losses = {}
    for name, m, step_fn in (("plain", plain, plain), ("compiled", compiled_model, compiled)):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        losses[name] = []
        for _ in range(3):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(step_fn(x).logits.float().flatten(0, 1), y.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses[name].append(loss.item())
    step_err = max(abs(a - b) / abs(b) for a, b in zip(losses["compiled"], losses["plain"], strict=True))
    ok = f_err <= tol_f and g_err <= tol_g and step_err <= TOL_STEPS
    return {"fwd_err": f_err, "grad_err": g_err, "tol": f"{tol_f:.2g}/{tol_g:.2g}", "step_err": step_err,
            "compile_s": round(compile_s, 1), "pass": ok,
            "note": f"{dims.compile_backend}; bf16 eager's own error {floor_f:.1e}/{floor_g:.1e}"}


def check_cache(case: Case, dims: Dims, device: torch.device) -> dict:
    """KV-cache decoding (a prompt, then one token at a time) against the full forward, fp32, the auto kernel."""
    with _fp32_matmuls(), torch.no_grad():
        model = _model(case, dims, "auto", device).eval()
        _randomize_pe(model)
        x, _ = _batch(case, dims, device)
        n, steps = dims.T // 2, 4
        full = model(x[:, :n + steps]).logits
        cache = model.new_cache()
        parts = [model(x[:, :n], cache=cache).logits] + [model(x[:, t:t + 1], cache=cache).logits
                                                         for t in range(n, n + steps)]
    err = rel(torch.cat(parts, 1), full)
    return {"fwd_err": err, "grad_err": None, "tol": f"{TOL_CACHE:g}", "pass": err <= TOL_CACHE,
            "note": f"{n}-token prompt + {steps} decoded"}


class _fp32_matmuls:
    """TF32 off inside: an fp32 comparison must not carry TF32's 1e-3 rounding."""

    def __enter__(self):
        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved


def correctness(report: Report, dims: Dims, device: torch.device, budget: Budget, only=None) -> None:
    per_row = 2.0
    for case in cases(dims.T):
        if only is not None and case.pe not in only and case.name not in only:
            continue
        key = {"family": case.family, "pe": case.name}
        for kernel in claimants(case, dims, device):
            report.attempt("correctness", {**key, "kernel": kernel, "dtype": "fp32"},
                           lambda c=case, k=kernel: check_kernel(c, dims, k, device), budget, per_row)
        if case.compiled:
            auto = auto_kernel_name(_model(case, dims, "eager", torch.device("cpu")).pe, device.type)
            report.attempt("correctness", {**key, "kernel": f"compiled({auto})", "dtype": "bf16"},
                           lambda c=case: check_compiled(c, dims, device), budget, 6 * per_row)
        if not case.bos:  # a KV cache decodes one stream; packed rows are a training layout
            report.attempt("correctness", {**key, "kernel": "kv-cache", "dtype": "fp32"},
                           lambda c=case: check_cache(c, dims, device), budget, per_row)


# ---------------------------------------------------------------------------------------------- the loop


def loop_config(size: str, pe: str, device: torch.device, out_dir: str, steps: int, warmup: int, extra=(),
                micro_batch: int | None = None):
    """The real loop's config for a timed run of `steps` steps, logging every 5 (a rate per 5 steps)."""
    over = ["model.seq_len=64"] if size == "nano" else []
    over += [f"train.out_dir={out_dir}", f"train.run_name={size}_{pe}", f"train.device={device.type}",
             "train.budget_unit=tokens", f"train.log_interval={5 if steps % 5 == 0 and warmup % 5 == 0 else 1}",
             "train.eval_interval=0", "train.ckpt_interval=0", "logging.wandb=disabled", "schedule.warmup_tokens=0",
             "schedule.warmup_frac=0", "schedule.decay_frac=0.01", f"train.max_steps={steps}"]
    if device.type == "cuda":
        over += ["train.compile=true", "train.precision=bf16"]
    cfg = load_config(model_size=size, pe_type=pe, overrides=[*over, *extra])  # `extra` last: it wins
    if micro_batch:
        cfg.train.micro_batch = micro_batch
    per_step = cfg.train.micro_batch * cfg.model.seq_len
    cfg.train.global_batch_tokens = per_step
    cfg.train.target_budgets = [float(per_step * steps * 100)]
    return cfg


def logged_rates(run_dir: str) -> list[tuple[int, float]]:
    rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["tokens_per_s"]) for r in rows if "tokens_per_s" in r]


def throughput_row(size: str, pe: str, dims: Dims, device: torch.device, matmul_rate: float, tmp: str) -> dict:
    cfg = loop_config(size, pe, device, tmp, dims.tp_steps, dims.tp_warmup,
                      micro_batch=2 if device.type == "cpu" else None)
    source = RandomTokens(cfg.model.vocab_size, cfg.model.seq_len)
    fresh_compile()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    out = train(cfg, source)
    wall = time.perf_counter() - t0
    rates = [r for step, r in logged_rates(out["run_dir"]) if step > dims.tp_warmup]
    tok_s = statistics.median(rates)
    stats = model_stats(cfg.model, cfg.pe, device.type)
    chunk = loss_chunk_tokens(cfg)
    predicted = peak_bytes(cfg, cfg.train.micro_batch, chunk).total
    measured = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    peak = peak_flops(device) or (DATASHEET_BF16 if device.type == "cuda" else 0.0)
    flops = stats.flops_per_token_train * tok_s
    steps_s = dims.tp_steps * cfg.train.micro_batch * cfg.model.seq_len / tok_s
    return {"kernel": stats.kernels[0], "params_M": stats.params_total / 1e6, "micro_batch": cfg.train.micro_batch,
            "seq_len": cfg.model.seq_len, "tok_s": tok_s, "mfu_datasheet": flops / peak if peak else None,
            "mfu_measured": flops / matmul_rate, "gflop_per_token": stats.flops_per_token_train / 1e9,
            "mem_gb": measured / 1e9 if measured is not None else None, "model_gb": predicted / 1e9,
            "mem_vs_model": measured / predicted - 1 if measured is not None else None,
            "setup_compile_s": round(wall - steps_s, 1), "compiled": cfg.train.compile}


def throughput(report: Report, dims: Dims, device: torch.device, budget: Budget, matmul_rate: float) -> None:
    last: dict[str, float] = {}  # the slowest row of each size so far
    with tempfile.TemporaryDirectory() as tmp:
        for size, pe in dims.tp_rows:
            # a new size: twice the previous size's slowest row, until a row of its own is timed
            need = last.get(size) or 2 * max(last.values(), default=0.0)
            measure = lambda s=size, p=pe: throughput_row(s, p, dims, device, matmul_rate, tmp)  # noqa: E731
            row = report.attempt("throughput", {"size": size, "pe": pe}, measure, budget, need)
            if row["status"] == "ok":
                last[size] = max(last.get(size, 0.0), row["wall_s"])


def resume_row(device: torch.device, tmp: str) -> dict:
    """The loop stopped at step 4 and resumed to 8 against 8 straight steps (train.max_steps counts the steps of
    one invocation; resume=auto)."""
    # uncompiled (bf16 on CUDA): what resume restores is the state, and a compile would cost most of this row's time
    extra = ["model.seq_len=128", "train.ckpt_interval=4", "train.log_interval=1", "model.dropout=0.1",
             "train.compile=false"]
    base = lambda name, *more: loop_config("nano", "alibi", device, tmp, 8, 0,
                                           [*extra, f"train.run_name={name}", *more], micro_batch=4)
    fresh_compile()
    cfg = base("full")
    source = RandomTokens(cfg.model.vocab_size, cfg.model.seq_len)
    full = train(cfg, source)
    train(base("part", "train.max_steps=4"), source)
    rest = train(base("part", "train.resume=auto", "train.max_steps=4"), source)  # max_steps: of this run
    losses = lambda d: {r["step"]: r["loss"] for r in (json.loads(x) for x in
                                                        (Path(d) / "metrics.jsonl").read_text().splitlines())
                        if "loss" in r}
    a, b = losses(full["run_dir"]), losses(rest["run_dir"])
    same = sorted(a) == sorted(b) and all(a[s] == b[s] for s in a)
    diff = max((abs(a[s] - b[s]) for s in a if s in b), default=float("nan"))
    return {"steps": len(a), "max_loss_diff": diff, "pass": same,
            "note": "alibi, nano, seq 128, dropout 0.1" + (", bf16, not compiled" if device.type == "cuda" else "")}


# ---------------------------------------------------------------------------------------------- the mode


def gpu_tests(device: torch.device, limit_s: float) -> dict:
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                   if "mark.gpu" in p.read_text(encoding="utf-8"))
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *files]
    paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]  # posbench from the source tree
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=max(5.0, limit_s))
    except subprocess.TimeoutExpired as e:
        raise TimeoutError(f"pytest -m gpu ran past {e.timeout:.0f} s") from None
    tail = [line for line in done.stdout.splitlines() if line.strip()][-1:] or ["(no output)"]
    print(done.stdout[-3000:], flush=True)
    return {"files": len(files), "summary": tail[0], "pass": done.returncode in (0, 5)}  # 5: all deselected


def run(args, budget: Budget, out: Path | None) -> ModeResult:
    device = torch.device("cpu" if args.dry_run else "cuda")
    dims = dims_for(args)
    report = Report("kernels", out, meta={"env": environment(device), "dry_run": args.dry_run})
    n = 1024 if args.dry_run else 8192
    report.meta["matmul_bf16_tflops"] = matmul_peak(device, torch.bfloat16, n, 3 if args.dry_run else 10) / 1e12
    report.meta["matmul_fp32_tflops"] = matmul_peak(device, torch.float32, n // 2, 3 if args.dry_run else 10) / 1e12
    report.save()
    matmul_rate = report.meta["matmul_bf16_tflops"] * 1e12 if device.type == "cuda" else \
        report.meta["matmul_fp32_tflops"] * 1e12
    print(f"[kernels] {report.meta['env']}; matmul bf16 {report.meta['matmul_bf16_tflops']:.1f} TFLOP/s",
          flush=True)
    parts = [p for p in SHARES if p not in set(args.skip)]

    def part(name: str) -> Budget:
        weights = [SHARES[p] for p in parts[parts.index(name):]]
        return budget.part(weights[0] / sum(weights))

    if "tests" in parts:
        limit = min(TESTS_CAP_S, part("tests").left())
        report.attempt("tests", {"what": "pytest -m gpu"}, lambda: gpu_tests(device, limit))
    if "correctness" in parts:
        correctness(report, dims, device, part("correctness"), args.cases)
    if "resume" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            report.attempt("resume", {"what": "stop at 4, resume to 8"}, lambda: resume_row(device, tmp),
                           part("resume"), 5.0)
    if "throughput" in parts:
        throughput(report, dims, device, part("throughput"), matmul_rate)
    if "profile" in parts and dims.tp_rows:
        size, pe = dims.tp_rows[0]  # the smallest size's first PE: where a step's time goes
        with tempfile.TemporaryDirectory() as tmp:
            cfg = loop_config(size, pe, device, tmp, dims.tp_steps, dims.tp_warmup,
                              micro_batch=2 if device.type == "cpu" else None)
        report.attempt("profile", {"size": size, "pe": pe}, lambda: profile_step(cfg, device), part("profile"))
    return ModeResult(tables(report, device), failed_rows(report))


def tables(report: Report, device: torch.device) -> list[str]:
    env = report.meta["env"]
    head = (f"{env.get('gpu', 'CPU')}, torch {env['torch']}, bf16 matmul {report.meta['matmul_bf16_tflops']:.0f} "
            f"TFLOP/s measured")
    t = report.tables
    texts = [markdown_table(f"GPU-only tests ({head})", t.get("tests", []),
                         [("what", "tests", ""), ("files", "files", ""), ("summary", "result", "")])]
    texts.append(markdown_table("Kernel correctness against the fp32 eager kernel (relative errors)",
                             t.get("correctness", []),
                             [("family", "family", ""), ("pe", "PE", ""), ("kernel", "kernel", ""),
                              ("dtype", "dtype", ""), ("fwd_err", "fwd err", ".1e"), ("grad_err", "grad err", ".1e"),
                              ("step_err", "3-step loss", ".1e"), ("tol", "tolerance", ""), ("pass", "pass", ""),
                              ("wall_s", "s", ".1f"), ("note", "note", "")]))
    texts.append(markdown_table("Resume on this device", t.get("resume", []),
                             [("what", "run", ""), ("steps", "steps", ""), ("max_loss_diff", "max |dloss|", ".1e"),
                              ("pass", "bit-identical", ""), ("note", "note", "")]))
    texts.append(markdown_table(f"Training throughput: the loop, {'compiled bf16' if device.type == 'cuda' else 'fp32'}"
                             f" ({head})", t.get("throughput", []),
                             [("size", "size", ""), ("pe", "PE", ""), ("kernel", "kernel", ""),
                              ("params_M", "params M", ".0f"), ("micro_batch", "mb", ""), ("tok_s", "tok/s", ",.0f"),
                              ("mfu_datasheet", "MFU (989)", ".1%"), ("mfu_measured", "MFU (measured)", ".1%"),
                              ("mem_gb", "peak GB", ".2f"), ("model_gb", "model GB", ".2f"),
                              ("mem_vs_model", "vs model", "+.0%"), ("setup_compile_s", "setup s", ".0f"),
                              ("wall_s", "wall s", ".0f")]))
    for r in t.get("profile", []):
        if r["status"] != "ok":
            texts.append(markdown_table("Where a training step's time goes", [r], [("size", "size", ""),
                                                                                     ("pe", "PE", "")]))
            continue
        shares = [{"kind": k, "share": v, "ms": v * r["device_ms"]} for k, v in r["shares"].items()]
        texts.append(markdown_table(
            f"Where a training step's time goes: {r['size']} {r['pe']}, {r['step_ms']:.1f} ms per step, "
            f"{r['device_ms']:.1f} ms of {'kernels' if device.type == 'cuda' else 'CPU ops'} (torch.profiler)",
            shares + r["top"], [("kind", "kind", ""), ("kernel", "largest kernels", ""), ("ms", "ms/step", ".2f"),
                                ("share", "share", ".1%")]))
    return texts

