"""How many intra-op threads a training or evaluation process uses (`train.threads`, eval's `--threads`).

A setting of the run, never a reading of the machine's load: a CPU matmul splits its sums across threads, so
another count can round differently, and a resume that picked its count from the load of the moment would not
continue bit for bit. `auto` depends only on how the process was launched (the cores it may use, the
processes started beside it, OMP_NUM_THREADS), and the count a run used is recorded in its meta.json, which
a resume reuses.

`auto` takes at most AUTO_CAP = 1 thread: on the small models this project trains on CPUs, one thread per process
is the fastest choice on a machine shared with other work, where OpenMP's threads wait for each other (the
README's smoke training on a loaded 2-core machine: a median 14.9k tokens/s with 1 thread, 2.2k with torch's
default of 2; a 3-length evaluation 46 s against 251 s: scripts/bench_threads.py). On an idle
machine two threads of one process are faster (procpool.py: 10-11k against ~7k tokens/s for the CPU demo model),
so a dedicated machine sets train.threads=N; more processes, not more threads, are how this project uses more
cores (studies, sweeps' --workers, torchrun).

A count has an upper bound, MAX_THREADS, checked where it is read (`check_threads`: train.threads, eval's --threads,
the bench scripts' --threads through cli/arg_types.thread_count): OpenMP allocates per thread before the first
matmul, so `train.threads=1e9` died in libgomp after the run directory was written. The bound is one number, not
the machine's core count, so a config that loads on one machine loads on every other.
"""

from __future__ import annotations

import os
from typing import Literal

from posbench.errors import ConfigError
from posbench.procpool import POOL_THREADS_ENV, usable_cores

Threads = int | Literal["auto"]
AUTO_CAP = 1
# far above any core count this project runs on (threads past the cores only wait: procpool.usable_cores), far below
# what OpenMP cannot allocate
MAX_THREADS = 1024


def thread_problem(count: int) -> str:
    """What is wrong with an intra-op thread count ("" when 1 <= count <= MAX_THREADS)."""
    if count < 1:
        return "is below 1"
    if count > MAX_THREADS:
        return f"is more than {MAX_THREADS:,} threads (threads beyond the cores only wait for each other)"
    return ""


def check_threads(count: int, setting: str) -> None:
    """ConfigError naming `setting` unless 1 <= count <= MAX_THREADS."""
    problem = thread_problem(count)
    if problem:
        raise ConfigError(f"{setting}={count:,} {problem}; give a count from 1 to the cores this process may use, "
                          "or auto")


def _positive(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def auto_threads() -> int:
    """The count a launcher chose (a process pool's share per worker, procpool.POOL_THREADS_ENV; OMP_NUM_THREADS,
    which torchrun and users set), else this process's share of the cores it may use (torchrun's local world
    splits them), at most AUTO_CAP."""
    chosen = _positive(POOL_THREADS_ENV) or _positive("OMP_NUM_THREADS")
    if chosen:
        return chosen
    return max(1, min(AUTO_CAP, usable_cores() // (_positive("LOCAL_WORLD_SIZE") or 1)))


def choose_threads(setting: Threads, recorded: int | None = None) -> tuple[int, str]:
    """(count, note): the count to use and, when it is not simply the setting, one line saying why.
    `recorded`: the count the checkpoint being resumed was trained with; `auto` keeps it, so the resume
    continues with the same float rounding on any machine."""
    if setting != "auto":
        if recorded is not None and recorded != setting:
            return setting, (f"threads: {setting} (train.threads) where the checkpoint was trained with {recorded}: "
                             "the continuation may round differently from an uninterrupted run")
        return setting, ""
    if recorded is not None:
        return recorded, ""
    return auto_threads(), ""
