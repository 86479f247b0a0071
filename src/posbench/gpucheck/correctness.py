"""The kernels mode's correctness table: per PE family, every attention kernel that claims the PE against the fp32
eager kernel with the same weights and inputs (the reference, computed once per case).

  fp32 rows     the kernel's logits without autograd (the evaluation path) and its gradients from a forward +
                backward (the training path), TF32 off: tolerance 1e-4 on the logits, 1e-3 on the worst parameter's
                gradient
  compiled      torch.compile of the model with the kernel training picks (fullgraph unless a kernel builds part of
                its call outside the graph: sdpa_dense), in bf16 autocast: tolerance
                max(2e-2, 3 x the bf16 eager model's own error) on the logits, max(5e-2, 3 x) on all gradients as one
                vector, and 3 AdamW steps against the same model uncompiled (losses within 2e-2 relative)
  kv-cache      decoding (a prompt, then one token at a time) against the full forward, fp32, 1e-4

Errors are relative, ||x - ref|| / ||ref||. Models are small (2 layers, 4 for the hybrids) with their PE parameters
moved off their initial values: a table that starts at zero would hide a kernel that drops the bias.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posbench.config import load_config
from posbench.gpucheck.common import Budget, Report, fresh_compile
from posbench.gpucheck.rows import MEASURED_CORRECTNESS
from posbench.model.attention_plan import auto_kernel_name
from posbench.model.kernels import KERNELS
from posbench.model.transformer import Transformer

TOL_FP32 = (1e-4, 1e-3)  # logits, worst parameter's gradient
TOL_BF16_FLOOR = (2e-2, 5e-2)
TOL_STEPS = 2e-2
TOL_CACHE = 1e-4
NEGLIGIBLE = 1e-6  # a reference gradient this small next to all of them is zero but for rounding (grad_error)
FORWARD_SEED = 3  # torch's generator before every forward of a row and of its reference (`seeded`)
ROW_S = 2.0  # what a row needs of the budget to be started (a compiled row: 6 x)


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
        Case("bias", "alibi", compiled=True), Case("bias", "t5", compiled=True), Case("bias", "kerple_log"),
        Case("bias", "fire", (f"pe.threshold_init={T // 4}",), compiled=True), Case("bias", "relative_learned"),
        Case("data-dependent", "fox", compiled=True), Case("data-dependent", "cope"),
        Case("data-dependent", "pope"),
        Case("hybrid/window", "rnope_swa", layers=4, compiled=True), Case("hybrid/window", "hybrid", layers=4),
        Case("hybrid/window", "alibi", (f"model.attention_window={T // 4}",), label="alibi+window"),
        Case("packing", "rope", doc, bos=True, compiled=True, label="rope+docs"),
        Case("packing", "alibi", doc, bos=True, label="alibi+docs"),
        Case("packing", "fox", doc, bos=True, label="fox+docs"),
        Case("packing", "fire", (*doc, f"pe.threshold_init={T // 4}"), bos=True, label="fire+docs"),
        # the recipes' attention options on a bias PE: flex carries sinks and chunks, a tempered score_mod
        Case("recipes", "alibi", ("model.attention_sinks=true",), compiled=True, label="alibi+sinks"),
        Case("recipes", "alibi", (f"model.attention_chunk={T // 4}",), label="alibi+chunk"),
        Case("recipes", "alibi", ("model.attention_temperature.name=log_n",), label="alibi+temperature"),
        Case("recipes", "t5", ("model.attention_temperature.name=log_n",), label="t5+temperature"),
        # the 2025-2026 zoo (docs/pe_defaults.md): each on every kernel that claims it and its KV cache, uncompiled:
        # the compile explain tests trace each PE's training graph, and a compiled row costs 6 rows' budget
        *(Case("2025-2026", pe) for pe in ("cable", "drope", "path", "stick_breaking", "repo", "grape_m",
                                           "grape_m_ctx", "grape_a", "grape_ap", "selective_rope", "tape", "seqpe")),
    ]


def case_names() -> list[str]:
    """What `--cases` may name: every case's PE and label."""
    return sorted({n for case in cases(64) for n in (case.pe, case.name)})


@dataclass(frozen=True)
class CheckDims:
    """The correctness models' size and batch, and how a compiled row compiles."""

    d_model: int
    n_heads: int
    d_ff: int
    T: int
    vocab: int
    batch: int
    # the dry run traces the same fullgraph step without inductor's code generation (tens of seconds per model
    # on a CPU): dynamo and AOTAutograd still see every PE's graph
    compile_backend: str = "inductor"


def build(case: Case, dims: CheckDims, kernel: str, device: torch.device, state=None) -> Transformer:
    over = ["model.size=test", f"model.d_model={dims.d_model}", f"model.n_heads={dims.n_heads}",
            f"model.d_ff={dims.d_ff}", f"model.n_layers={case.layers}", f"model.seq_len={dims.T}",
            f"model.vocab_size={dims.vocab}", f"model.attention={kernel}", *case.overrides]
    if case.bos:
        over.append(f"model.packing.bos_id={dims.vocab - 1}")
    cfg = load_config(overrides=over, pe_type=case.pe)
    torch.manual_seed(0)
    model = Transformer(cfg.model, cfg.pe, device.type, loss_chunk_tokens=0)
    if state is not None:
        model.load_state_dict(state)
    return model.to(device)


def _randomize_pe(model: Transformer) -> None:
    """PE tables that start at zero (T5, relative_learned, CoPE) would hide a kernel that drops the bias."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.pe.parameters():
            p.add_((torch.randn(p.shape, generator=g) * 0.3).to(p.device, p.dtype))


def _batch(case: Case, dims: CheckDims, device: torch.device):
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, dims.vocab - 1, (dims.batch, dims.T + 1), generator=g)
    if case.bos:  # documents of a few lengths, each row its own cut
        for b, starts in enumerate(([0, dims.T // 3, dims.T // 2 + 5], [7, dims.T // 4, 3 * dims.T // 4])):
            idx[b, starts] = dims.vocab - 1
    idx = idx.to(device)
    return idx[:, :-1], idx[:, 1:]


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


@dataclass
class Pass:
    """One model's outputs on a case's batch: logits of the no-grad forward (the evaluation path; None when not
    asked), of the training forward, and the training forward's gradients by parameter name."""

    eval_logits: torch.Tensor | None
    train_logits: torch.Tensor
    grads: dict


def seeded(model, x):
    """The model's output on x with torch's generator at FORWARD_SEED first: a PE that draws in training mode
    (SeqPE shifts a batch's positions with probability 0.1, as its authors train it) draws the same in each of a
    row's forwards as in the reference's, so a row differs only by its kernel. Without it, CPU flex's forward again
    after its missing backward read a third draw (a false failure), and the compiled steps each their own."""
    torch.manual_seed(FORWARD_SEED)
    return model(x)


def forward_backward(model, x, y, device: torch.device, bf16: bool = False, eval_path: bool = True) -> Pass:
    model.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        if eval_path:
            with torch.no_grad():
                eval_logits = seeded(model, x).logits.float()
        out = seeded(model, x).logits.float()
    F.cross_entropy(out.flatten(0, 1), y.flatten()).backward()
    inner = getattr(model, "_orig_mod", model)  # a compiled model's parameters are its original's
    grads = {n: p.grad.detach().float().clone() for n, p in inner.named_parameters() if p.grad is not None}
    return Pass(eval_logits if eval_path else None, out.detach(), grads)


def grad_error(grads: dict, ref: dict, worst_parameter: bool = True) -> float:
    """The worst parameter's relative gradient error (a parameter with no gradient where the reference has one
    counts as error 1); with `worst_parameter` False, the error of all gradients as one vector (bf16: a PE's few
    parameters whose gradients bf16 rounds by a whole 100%, FIRE's MLP, would otherwise decide the row).

    A parameter whose reference gradient is negligible (below NEGLIGIBLE of all gradients' norm) is zero in exact
    arithmetic (FIRE's output bias b2 adds one constant to a head's every logit, which softmax ignores): its
    relative error is rounding noise over noise, so its error is measured against all gradients' norm instead."""
    if not worst_parameter:
        names = [n for n in ref if n in grads]
        if len(names) < len(ref):
            return 1.0
        return rel(torch.cat([grads[n].flatten() for n in names]), torch.cat([ref[n].flatten() for n in names]))
    total = float(torch.cat([g.float().flatten() for g in ref.values()]).norm()) if ref else 0.0
    worst = 0.0
    for name, g_ref in ref.items():
        if name not in grads:
            worst = max(worst, 1.0 if float(g_ref.norm()) > 0 else 0.0)
        elif float(g_ref.norm()) <= NEGLIGIBLE * total:
            worst = max(worst, float((grads[name].float() - g_ref.float()).norm()) / max(total, 1e-30))
        else:
            worst = max(worst, rel(grads[name], g_ref))
    return worst


class _fp32_matmuls:
    """TF32 off inside: an fp32 comparison must not carry TF32's 1e-3 rounding."""

    def __enter__(self):
        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved


@dataclass
class Reference:
    """A case's weights (PE moved off its init), batch and fp32 eager outputs: what every row of the case is held to."""

    state: dict
    x: torch.Tensor
    y: torch.Tensor
    fp32: Pass

    @classmethod
    def of(cls, case: Case, dims: CheckDims, device: torch.device) -> Reference:
        with _fp32_matmuls():
            model = build(case, dims, "eager", device)
            _randomize_pe(model)
            x, y = _batch(case, dims, device)
            return cls(model.state_dict(), x, y, forward_backward(model, x, y, device))


def check_kernel(case: Case, dims: CheckDims, kernel: str, device: torch.device, ref: Reference) -> dict:
    with _fp32_matmuls():
        model = build(case, dims, kernel, device, ref.state)
        try:
            out = forward_backward(model, ref.x, ref.y, device)
            logits, g_err = out.eval_logits, grad_error(out.grads, ref.fp32.grads)
        except Exception:  # a kernel without a backward here (flex on a CPU): its forward still counts
            if device.type != "cpu" or kernel != "flex":
                raise
            with torch.no_grad():
                logits, g_err = seeded(model, ref.x).logits.float(), None
    f_err = rel(logits, ref.fp32.eval_logits)
    ok = f_err <= TOL_FP32[0] and (g_err is None or g_err <= TOL_FP32[1])
    return {"fwd_err": f_err, "grad_err": g_err, "tol": f"{TOL_FP32[0]:g}/{TOL_FP32[1]:g}", "pass": ok,
            "note": "no CPU backward: forward only" if g_err is None else ""}


def check_compiled(case: Case, dims: CheckDims, device: torch.device, ref: Reference) -> dict:
    """The training path: the compiled model (fullgraph, the auto kernel) in bf16 against fp32 eager, then 3 AdamW
    steps against the same model uncompiled."""
    with _fp32_matmuls():  # bf16's own rounding, the floor of the tolerance
        bf = forward_backward(build(case, dims, "eager", device, ref.state), ref.x, ref.y, device, bf16=True,
                              eval_path=False)
    floor_f = rel(bf.train_logits, ref.fp32.train_logits)
    floor_g = grad_error(bf.grads, ref.fp32.grads, worst_parameter=False)
    tol_f, tol_g = max(TOL_BF16_FLOOR[0], 3 * floor_f), max(TOL_BF16_FLOOR[1], 3 * floor_g)
    fresh_compile()
    plain = build(case, dims, "auto", device, ref.state)
    compiled_model = build(case, dims, "auto", device, ref.state)
    # fullgraph where every kernel fits one graph (a graph break around flex would run it uncompiled, silently)
    whole = all(block.attn.kernel.compiles_whole for block in compiled_model.blocks)
    compiled = torch.compile(compiled_model, fullgraph=whole, backend=dims.compile_backend)
    t0 = time.perf_counter()
    out = forward_backward(compiled, ref.x, ref.y, device, bf16=True, eval_path=False)
    compile_s = time.perf_counter() - t0
    f_err = rel(out.train_logits, ref.fp32.train_logits)
    g_err = grad_error(out.grads, ref.fp32.grads, worst_parameter=False)
    losses = {}
    for name, m, step_fn in (("plain", plain, plain), ("compiled", compiled_model, compiled)):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        losses[name] = []
        for _ in range(3):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(seeded(step_fn, ref.x).logits.float().flatten(0, 1), ref.y.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses[name].append(loss.item())
    step_err = max(abs(a - b) / abs(b) for a, b in zip(losses["compiled"], losses["plain"], strict=True))
    ok = f_err <= tol_f and g_err <= tol_g and step_err <= TOL_STEPS
    return {"fwd_err": f_err, "grad_err": g_err, "tol": f"{tol_f:.2g}/{tol_g:.2g}", "step_err": step_err,
            "compile_s": round(compile_s, 1), "pass": ok,
            "note": f"{dims.compile_backend}; bf16 eager's own error {floor_f:.1e}/{floor_g:.1e}"}


def check_cache(case: Case, dims: CheckDims, device: torch.device, ref: Reference) -> dict:
    """KV-cache decoding (a prompt, then one token at a time) against the full forward, fp32, the auto kernel."""
    with _fp32_matmuls(), torch.no_grad():
        model = build(case, dims, "auto", device, ref.state).eval()
        n, steps = dims.T // 2, 4
        full = model(ref.x[:, :n + steps]).logits
        cache = model.new_cache()
        parts = [model(ref.x[:, :n], cache=cache).logits] + [model(ref.x[:, t:t + 1], cache=cache).logits
                                                             for t in range(n, n + steps)]
    err = rel(torch.cat(parts, 1), full)
    return {"fwd_err": err, "grad_err": None, "tol": f"{TOL_CACHE:g}", "pass": err <= TOL_CACHE,
            "note": f"{n}-token prompt + {steps} decoded"}


@dataclass(frozen=True)
class Row:
    """One row of the table: its case, what it checks (a kernel name, "compiled" or "kv-cache"), its key columns,
    how to measure it and what it needs of the budget to be started."""

    case: Case
    what: str
    key: dict
    measure: Callable[[], dict]
    need_s: float

    @property
    def measured(self) -> bool:
        return (self.case.name, self.what) in MEASURED_CORRECTNESS


def rows(dims: CheckDims, device: torch.device, reference, only=None) -> list[Row]:
    """Every case's rows (or those of the cases whose PE or label is in `only`): each registered kernel that claims
    the PE in fp32 (eager, the reference, aside), its compiled model, its KV cache; never-measured rows first."""
    out = []
    for case in cases(dims.T):
        if only is not None and case.pe not in only and case.name not in only:
            continue
        key = {"family": case.family, "pe": case.name}
        reference_model = build(case, dims, "eager", torch.device("cpu"))
        pe = reference_model.pe
        kernels = [k for k in KERNELS.names() if k != "eager"
                   and KERNELS.get(k).supports(pe, device.type, 0.0, reference_model.cfg.packing) is None]
        for kernel in kernels:
            out.append(Row(case, kernel, {**key, "kernel": kernel, "dtype": "fp32"},
                           lambda c=case, k=kernel: check_kernel(c, dims, k, device, reference(c)), ROW_S))
        if case.compiled:
            out.append(Row(case, "compiled", {**key, "kernel": f"compiled({auto_kernel_name(pe, device.type)})",
                                              "dtype": "bf16"},
                           lambda c=case: check_compiled(c, dims, device, reference(c)), 6 * ROW_S))
        if not case.bos:  # a KV cache decodes one stream; packed rows are a training layout
            out.append(Row(case, "kv-cache", {**key, "kernel": "kv-cache", "dtype": "fp32"},
                           lambda c=case: check_cache(c, dims, device, reference(c)), ROW_S))
    return sorted(out, key=lambda r: r.measured)  # stable: a case's rows stay together within each group


def correctness(report: Report, dims: CheckDims, device: torch.device, budget: Budget, only=None) -> None:
    """Every row of `rows`, in its order, each under the budget; a row's wall time includes its compiles."""
    # made by the case's first row that runs (a case the budget skips costs nothing), kept for its next rows
    reference = functools.lru_cache(maxsize=1)(lambda case: Reference.of(case, dims, device))
    for row in rows(dims, device, reference, only):
        report.attempt("correctness", {**row.key, "measured_before": row.measured}, row.measure, budget, row.need_s)
