"""Independent jobs in parallel worker processes, one log file per job, every failure reported.

Studies run their cells this way and sweeps their runs (`--workers`). Workers are spawned, not forked:
the parent may hold torch/OpenMP thread pools that fork would copy broken. Each worker gets
`threads` intra-op threads: on a small CPU, N single-thread processes of small models beat one
N-thread process (two 1-thread trainings of the CPU demo's model: 13.7k tokens/s together, one
2-thread training: 10-11k). Workers exit when their parent dies: a killed study or sweep (SIGKILL, a
closed terminal) must not leave orphans training on, holding cores and writing into its directory.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from posbench.fileio import open_append


def usable_cores() -> int:
    """The cores this process may run on: `taskset`, cgroup cpusets and job schedulers narrow them below
    os.cpu_count(), and threads beyond them only wait for each other (OpenMP's workers spin while one of them
    is descheduled)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows: no affinity API
        return os.cpu_count() or 1


def threads_per_worker(workers: int) -> int:
    return max(1, usable_cores() // max(1, workers))


# the thread count call_logged gives a job, in its environment: `train.threads=auto` keeps it (posbench/threads.py)
POOL_THREADS_ENV = "POSBENCH_POOL_THREADS"
PARENT_POLL_S = 0.5  # how often a worker checks that the process that started it is still alive


def exit_with_parent(parent: int) -> None:
    """Pool initializer: end this worker when `parent` is gone. A daemon thread polls the parent pid,
    because Python offers no portable parent-death signal (prctl PDEATHSIG is Linux-only and fires when
    the *thread* that spawned the worker exits, which in a pool is not the parent's death)."""

    def watch():
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)  # reparented: the parent died without shutting the pool down

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def call_logged(fn: Callable, args: tuple, log_path: str, threads: int):
    """fn(*args) with `threads` torch threads and its output appended to log_path."""
    import torch  # in the worker: torch loads once per process

    torch.set_num_threads(threads)
    previous = os.environ.get(POOL_THREADS_ENV)
    os.environ[POOL_THREADS_ENV] = str(threads)
    try:
        with open_append(log_path) as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
            return fn(*args)
    finally:  # a job run in the calling process (one worker) leaves its environment as it found it
        if previous is None:
            os.environ.pop(POOL_THREADS_ENV, None)
        else:
            os.environ[POOL_THREADS_ENV] = previous


def run_jobs(fn: Callable, jobs: dict[str, tuple], workers: int, log_dir: Path,
             on_done: Callable[[str], None] = lambda name: None) -> list[str]:
    """fn(*args) for every (name, args) of `jobs` in `workers` processes, output appended to
    `<log_dir>/<name>.log`; returns one line per failed job (the others still finish)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    threads = threads_per_worker(workers)
    failures = []
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=exit_with_parent,
                             initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(call_logged, fn, args, str(log_dir / f"{name}.log"), threads): name
                   for name, args in jobs.items()}
        try:
            for fut in as_completed(futures):
                name = futures[fut]
                try:
                    fut.result()
                except Exception as e:  # report every failed job, keep the finished ones
                    failures.append(f"{name}: {e.__class__.__name__}: {e} (log: {log_dir / f'{name}.log'})")
                on_done(name)
        except KeyboardInterrupt:  # Ctrl-C: the queued jobs must not start while the pool shuts down
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return failures
