"""One thread's fp32 matmul rate on this machine: what bench_study.py reports as the FLOP floor's peak and what the
app's cost estimate scales the measured quickstart by (a faster or slower CPU than the one it was measured on)."""

from __future__ import annotations

import time

import torch


def matmul_rate(m: int, k: int, n: int, repeats: int = 7, library: str = "torch",
                flop_per_timing: float = 2e9) -> float:
    """FLOP/s of one thread's fp32 (m x k) @ (k x n), best of `repeats` timings of about `flop_per_timing` each (well
    above the clock's grain), in thread CPU time (other processes' load does not count against it). `library`:
    torch's own matmul (its BLAS) or oneDNN's, as model.matmul=onednn runs the linear layers (model/matmul.py)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(m, k), torch.randn(k, n)
        if library == "onednn":
            bt = b.t()  # oneDNN's linear takes (n x k) weights: the transposed view, as the model passes them
            product = lambda: torch.ops.mkldnn._linear_pointwise(a, bt, None, "none", [], "")  # noqa: E731
        else:
            product = lambda: a @ b  # noqa: E731
        inner = max(1, int(flop_per_timing // (2 * m * k * n)))
        best = float("inf")
        for _ in range(repeats + 1):  # the first is a warm-up
            t0 = time.thread_time()
            for _ in range(inner):
                product()
            best = min(best, (time.thread_time() - t0) / inner)
        return 2 * m * k * n / best
    finally:
        torch.set_num_threads(threads)
