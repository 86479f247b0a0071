"""`model.matmul=auto`: torch's BLAS or oneDNN for the linear layers, whichever this machine runs faster at this
model's shapes, measured when the run starts.

Why a measurement, not a rule by CPU: on an AVX-512 AMD EPYC oneDNN ran the quickstart model's products at about 2x
MKL's rate; on a 2-core AVX2 EPYC it ran them at 0.92-0.99x, larger products at 0.71-0.83x (measured on those
machines; none is kept as data).
No table of CPUs here predicts which side of 1 a machine is on.

The probe (`probe_rates`): every distinct (in, out) shape of the model's `nn.Linear` layers, on the step's rows
(batch x sequence), runs its forward and both backward products through the very modules a run would use
(`nn.Linear`'s F.linear and `OneDNNLinear`), at this process's thread count. Each shape and library is timed
REPEATS times after a warm-up, the two libraries interleaved so a change in the machine's load falls on both, and
the best timing counts. A library's rate is the step's FLOPs (6 x rows x in x out per layer, each shape weighted
by its number of layers) over the sum of its best times. A product above PRODUCT_FLOP is shrunk first (the
larger of rows and outputs halved; the reduction dimension is kept): a GEMM's rate has levelled off at that size,
and it keeps the probe near a second for a model with a 65k-token head. The LM head counts as the linear layer it
is; under the fused chunked loss (large vocabularies, model/loss.py) its products run in torch's mm whichever
library is chosen.
Results are cached per (shapes, rows, threads) in this process.

The decision (`choose`) is a pure function of the two rates: oneDNN only when it is at least ONEDNN_MARGIN times
as fast, so a near-tie (within the probe's own noise, about 5% between calls) keeps torch's path, whose
rounding is what a run has unless another path buys time. The choice is recorded in the run's meta.json (like the
thread count, posbench/threads.py) and a resume reuses it instead of measuring again, so it rounds as the run began.
"""

from __future__ import annotations

import time
from collections import Counter
from functools import lru_cache

import torch
from torch import nn

from posbench.model.matmul import AUTO, MATMULS, OneDNNLinear

# oneDNN's rate over torch's it must reach to be chosen: the probe's ratio on a machine where the two tie swung
# 0.97-1.05 between calls (a shared 2-core AMD EPYC, `probe_rates`); where oneDNN pays it is ~2x
ONEDNN_MARGIN = 1.10
REPEATS = 7  # timings per shape and library after the warm-up; the best counts (0.2 s for the quickstart model)
PRODUCT_FLOP = 1e9  # forward + backward FLOPs of one timed product at most (about 10 ms at 100 GFLOP/s)
MIN_DIM = 256  # shrinking stops here: below it the shape, not the size, sets the rate

Shapes = tuple[tuple[int, int, int], ...]  # (in, out, layers with that shape), sorted


def linear_shapes(model: nn.Module) -> Shapes:
    """The model's `nn.Linear` layers as (in, out, count): the layers `model.matmul` swaps (model/matmul.py)."""
    counts = Counter((m.in_features, m.out_features) for m in model.modules()
                     if type(m) is nn.Linear or type(m) is OneDNNLinear)
    return tuple(sorted((i, o, n) for (i, o), n in counts.items()))


def probe_size(rows: int, inp: int, out: int) -> tuple[int, int]:
    """(rows, out) of the timed product: the larger of the two halved while its 6 x rows x in x out FLOPs exceed
    PRODUCT_FLOP and the half is still at least MIN_DIM."""
    while 6 * rows * inp * out > PRODUCT_FLOP and max(rows, out) >= 2 * MIN_DIM:
        if rows >= out:
            rows //= 2
        else:
            out //= 2
    return rows, out


def _timed_step(layer: nn.Module, x_MI: torch.Tensor, dy_MO: torch.Tensor, clock) -> float:
    t0 = clock()
    y_MO = layer(x_MI)
    torch.autograd.grad(y_MO, (x_MI, layer.weight), dy_MO)  # dL/dx and dL/dW, as a training step needs
    return clock() - t0


@lru_cache(maxsize=32)
def probe_rates(shapes: Shapes, rows: int, threads: int) -> dict[str, float]:
    """FLOP/s of a training step's linear products per library (module docstring), with `threads` torch threads.
    One thread is timed in its own CPU time (other processes' load does not count against it), more in wall time
    (their sums are spread over threads the calling one waits for)."""
    clock = time.thread_time if threads == 1 else time.perf_counter
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        cases = []
        for inp, out, count in shapes:
            m, o = probe_size(rows, inp, out)
            plain = nn.Linear(inp, o, bias=False)
            fast = OneDNNLinear(inp, o, bias=False)
            fast.weight = plain.weight  # the same parameter, as model/matmul.py swaps it
            x_MI, dy_MO = torch.randn(m, inp, requires_grad=True), torch.randn(m, o)
            cases.append(({"torch": plain, "onednn": fast}, x_MI, dy_MO, 6 * m * inp * o, count))
        best: dict[tuple[str, int], float] = {}
        with torch.enable_grad():
            for rep in range(REPEATS + 1):  # the first is a warm-up
                for k, (layers, x_MI, dy_MO, _, _) in enumerate(cases):
                    for library, layer in layers.items():
                        t = _timed_step(layer, x_MI, dy_MO, clock)
                        if rep:
                            best[library, k] = min(best.get((library, k), float("inf")), t)
        flop = sum(f * n for _, _, _, f, n in cases)
        return {library: flop / max(1e-9, sum(best[library, k] * c[4] for k, c in enumerate(cases)))
                for library in ("torch", "onednn")}
    finally:
        torch.set_num_threads(saved)


def choose(rates: dict[str, float], margin: float = ONEDNN_MARGIN) -> str:
    """The library to use given each one's measured rate: oneDNN when its rate is at least `margin` x torch's."""
    return "onednn" if rates["onednn"] / rates["torch"] >= margin else "torch"  # the ratio, as the note prints it


def resolve_matmul(setting: str, model: nn.Module, rows: int, device_type: str = "cpu",
                   recorded: str | None = None) -> tuple[str, str]:
    """(library, note): the library `setting` (model.matmul) means for this run and, when it is not simply the
    setting, one line saying why. `rows`: the rows of one step's products (micro-batch x sequence length).
    `recorded`: the library the run being continued used (its meta.json); `auto` keeps it without probing, so the
    continuation rounds as the run began. Off the CPU, or on a torch without oneDNN, `auto` is torch's path."""
    if setting != AUTO:
        if recorded in MATMULS and recorded != setting:
            return setting, (f"matmul: {setting} (model.matmul) where the checkpoint was trained with {recorded}: "
                             "the continuation may round differently from an uninterrupted run")
        return setting, ""
    if recorded in MATMULS:
        return recorded, f"matmul: {recorded} (model.matmul=auto, as the checkpoint being continued recorded)"
    if device_type != "cpu" or not torch.backends.mkldnn.is_available():
        return "torch", ""
    threads = torch.get_num_threads()
    rates = probe_rates(linear_shapes(model), rows, threads)
    chosen = choose(rates)
    return chosen, (f"matmul: {chosen} (model.matmul=auto: oneDNN ran this model's linear products at "
                    f"{rates['onednn'] / rates['torch']:.2f}x torch's rate here on {threads} thread"
                    f"{'s' * (threads > 1)}; it is chosen from {ONEDNN_MARGIN:.2f}x)")
