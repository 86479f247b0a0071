"""Test-only fault injection, behind one call: `inject(fault, at, value)`.

Each fault is armed by an environment variable that names where it strikes (a step, or a step and a rank), so a
test or a fault drill can break one exact point of a real run, subprocesses and torchrun workers included,
without a flag in the code it breaks. Unarmed, `inject` hands `value` back unchanged.

  POSBENCH_INJECT_NAN=step,rank        nan_loss: that rank's loss at that step becomes NaN (training/loop.py)
  POSBENCH_CRASH_DURING_SAVE=step      crash_during_save: the process dies (exit 17) with half that step's
                                       checkpoint written (training/checkpoint.py)
  POSBENCH_ENOSPC_DURING_SAVE=step     full_disk: the checkpoint files of that step fail with ENOSPC after 4 KiB,
                                       inside the real torch.save, as a full disk does (training/checkpoint.py)
"""

from __future__ import annotations

import errno
import os
from typing import Any


class Fault:
    """One fault: the variable that arms it and what it does to the value at its point."""

    env: str

    def strike(self, value: Any) -> Any:
        raise NotImplementedError


class NanLoss(Fault):
    env = "POSBENCH_INJECT_NAN"

    def strike(self, loss):
        return loss * float("nan")


class CrashDuringSave(Fault):
    env = "POSBENCH_CRASH_DURING_SAVE"

    def strike(self, value):
        os._exit(17)


class FullDisk(Fault):
    env = "POSBENCH_ENOSPC_DURING_SAVE"

    def strike(self, f):
        return _FullFile(f)


class _FullFile:
    """A file whose writes fail with ENOSPC after 4 KiB, exactly as a full disk does under torch.save (which
    turns it into a RuntimeError)."""

    def __init__(self, f):
        self.f, self.n = f, 0

    def write(self, data) -> int:
        self.n += len(data)
        if self.n > 4096:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


FAULTS: dict[str, Fault] = {"nan_loss": NanLoss(), "crash_during_save": CrashDuringSave(), "full_disk": FullDisk()}


def inject(fault: str, at: str, value: Any = None) -> Any:
    """`value` as fault `fault` leaves it when its variable names `at` (e.g. "5,1": step 5, rank 1), else
    `value` itself."""
    chosen = FAULTS[fault]
    return chosen.strike(value) if os.environ.get(chosen.env) == at else value
